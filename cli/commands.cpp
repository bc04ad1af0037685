// State shared by the CLI's subcommands: the exit status a callback sets without throwing.
#include "cli/commands.h"

namespace zest::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

}  // namespace zest::cli
