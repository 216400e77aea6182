#pragma once

#include <utility>
#include <vector>

namespace kvlab {

// Summaries of repeated measurements (0 for none): the median is the upper middle element.
double median_of(std::vector<double> samples);
double min_of(const std::vector<double>& samples);
double max_of(const std::vector<double>& samples);

// Mean and sample standard deviation (n − 1; 0 for one value; NaN, NaN for none): the
// "mean ± std" over seeds of every suite's table.
std::pair<double, double> mean_std(const std::vector<double>& xs);

}  // namespace kvlab
