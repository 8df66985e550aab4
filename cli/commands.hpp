// The subcommands of the `actorpipe` program; each lives in its own file and registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace ap::cli {

void add_train_command(CLI::App& app);     // train_command.cpp
void add_schedule_command(CLI::App& app);  // schedule_command.cpp
void add_node_command(CLI::App& app);      // node_command.cpp
void add_generate_command(CLI::App& app);  // generate_command.cpp
void add_launch_command(CLI::App& app);    // launch_command.cpp
void add_certs_command(CLI::App& app);     // certs_command.cpp
void add_tokenize_command(CLI::App& app);  // tokenize_command.cpp

}  // namespace ap::cli
