// actorpipe: pipeline-parallel training on CAF actors. `actorpipe train --help`, `actorpipe schedule --help`.
#include <exception>
#include <iostream>

#include "cli/commands.hpp"
#include "tensor/tensor.hpp"

int main(int argc, char** argv) {
  ap::keep_tensor_memory();
  CLI::App app{"actorpipe: pipeline-parallel training on CAF actors"};
  app.require_subcommand(1);
  ap::cli::add_train_command(app);
  ap::cli::add_schedule_command(app);
  ap::cli::add_node_command(app);
  ap::cli::add_generate_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
