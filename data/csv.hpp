// CSV with a header row as a classification source: numeric feature columns and one named label column.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "data/data_source.hpp"

namespace ap {

// Reads `path`: a header line naming the columns, then one sample a line. `label_column` holds class ids
// (below `classes` when not 0, else num_classes is the largest + 1); the other columns are the features
// (n, columns - 1), float32. Throws std::runtime_error naming the file, line and column.
dataset csv_dataset(const std::string& path, const std::string& label_column = "label", std::size_t classes = 0);
std::shared_ptr<const data_source> csv_source(const std::string& path, const std::string& label_column = "label",
                                              std::size_t classes = 0);

}  // namespace ap
