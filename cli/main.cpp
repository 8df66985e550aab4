// actorpipe: pipeline-parallel training on CAF actors. `actorpipe train --help`, `actorpipe schedule --help`.
#include <exception>
#include <iostream>
#include <string>

#include "actorpipe/version.hpp"
#include "cli/commands.hpp"
#include "actors/handshake.hpp"
#include "tensor/tensor.hpp"

static_assert(ACTORPIPE_WIRE_PROTOCOL_VERSION == ap::wire_protocol_version,
              "actorpipe/version.hpp is stale: re-run CMake (it reads actors/handshake.hpp)");

int main(int argc, char** argv) {
  ap::keep_tensor_memory();
  CLI::App app{"actorpipe: pipeline-parallel training on CAF actors"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("actorpipe ") + ACTORPIPE_VERSION_STRING + " (wire protocol " +
                                        std::to_string(ACTORPIPE_WIRE_PROTOCOL_VERSION) + ")");
  ap::cli::add_train_command(app);
  ap::cli::add_schedule_command(app);
  ap::cli::add_node_command(app);
  ap::cli::add_generate_command(app);
  ap::cli::add_launch_command(app);
  ap::cli::add_certs_command(app);
  ap::cli::add_tokenize_command(app);
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
