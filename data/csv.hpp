// CSV with a header row: numeric feature columns and one label column chosen by name, read as a classification source.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "data/data_source.hpp"

namespace ap {

// Reads `path`: the first line names the columns (comma-separated); every other non-empty line is a sample.
// The column `label_column` holds class ids (non-negative integers, below `classes` when it is not 0, else
// num_classes is the largest + 1); the others, in file order, are the features (n, columns - 1) as float32.
// Throws std::runtime_error naming the file, and for a bad row its line number and column name: a missing,
// empty or non-numeric (or non-finite) field, a row with too many fields, a bad label; and for a missing
// label column, the columns there are.
dataset csv_dataset(const std::string& path, const std::string& label_column = "label", std::size_t classes = 0);
std::shared_ptr<const data_source> csv_source(const std::string& path, const std::string& label_column = "label",
                                              std::size_t classes = 0);

}  // namespace ap
