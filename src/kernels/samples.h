#pragma once

#include <vector>

namespace kvlab {

// Summaries of repeated measurements (0 for none): the median is the upper middle element.
double median_of(std::vector<double> samples);
double min_of(const std::vector<double>& samples);
double max_of(const std::vector<double>& samples);

}  // namespace kvlab
