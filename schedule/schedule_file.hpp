// A schedule file as `schedule --file` and `train --schedule-file` read it: a grid, or CSV by the .csv extension.
#pragma once

#include <string>

#include "schedule/schedule.hpp"

namespace ap {

// Throws std::runtime_error naming the file (cannot open, or the parser's line and token).
schedule read_schedule_file(const std::string& path);

std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text);

}  // namespace ap
