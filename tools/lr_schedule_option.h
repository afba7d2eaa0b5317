#pragma once
// `tessera train --lr-schedule` and `--warmup-epochs`: the text of the option, read into an
// optim::LrSchedule (optim/lr_schedule.h).
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "tessera/optim/lr_schedule.h"

namespace tessera::tools {

// What --help says of --lr-schedule: the syntax, one kind per line.
extern const char* const kLrScheduleHelp;

// The schedule `text` names, as --lr-schedule takes it (kLrScheduleHelp), with a linear
// warm-up of `warmup_epochs` first when > 0; a cosine schedule anneals over the `epochs`
// after the warm-up. Empty text: the warm-up alone, or none (nullptr). Error naming the
// option, the text and the syntax for text that is none of the kinds, and the schedules'
// own errors (a gamma of 0) for values they refuse.
std::shared_ptr<const optim::LrSchedule> parse_lr_schedule(const std::string& text, int epochs,
                                                           int warmup_epochs);

// Checks --lr-schedule's text when the command line is read, before any data is loaded.
extern const CLI::Validator kLrScheduleSyntax;

}  // namespace tessera::tools
