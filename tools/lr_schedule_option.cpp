#include "lr_schedule_option.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tessera/error.h"

namespace tessera::tools {

const char* const kLrScheduleHelp =
    "Learning-rate schedule, stepped per epoch as PyTorch's: step:N[:GAMMA] (lr times GAMMA, "
    "default 0.1, every N epochs), multistep:E1,E2,...[:GAMMA] (times GAMMA at each of those "
    "epochs), exp:GAMMA (times GAMMA every epoch), cosine[:ETA_MIN] (cosine annealing from "
    "--lr down to ETA_MIN, default 0, over --epochs less the warm-up: a resumed run needs the "
    "same --epochs). With --warmup-epochs, a schedule's epochs count from the warm-up's end. "
    "Default: a constant --lr";

namespace {

// `text` whole as an int / a finite double; nothing otherwise.
std::optional<int> int_of(const std::string& text) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, v);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return v;
}

std::optional<double> double_of(const std::string& text) {
  char* stop = nullptr;
  // strtod skips leading spaces; int_of takes none, so neither does this.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  const double v = std::strtod(text.c_str(), &stop);
  if (*stop != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<std::string> split(const std::string& text, char at) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find(at, start)) != std::string::npos; start = end + 1) {
    parts.push_back(text.substr(start, end - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

[[noreturn]] void malformed(const std::string& text, const std::string& why) {
  throw Error(fmt::format(
      "[train] --lr-schedule '{}': {}. Give step:N[:GAMMA], multistep:E1,E2,...[:GAMMA], "
      "exp:GAMMA or cosine[:ETA_MIN], e.g. step:30:0.1 or cosine",
      text, why));
}

// The schedule alone, without warm-up; `epochs`: a cosine's t_max.
std::shared_ptr<const optim::LrSchedule> schedule_of(const std::string& text, int epochs) {
  const std::vector<std::string> parts = split(text, ':');
  const std::string& kind = parts[0];
  const auto number = [&](std::size_t i, const char* what) {
    const auto v = double_of(parts[i]);
    if (!v) malformed(text, fmt::format("{} '{}' is not a finite number", what, parts[i]));
    return *v;
  };
  const auto count = [&](const std::string& part, const char* what) {
    const auto v = int_of(part);
    if (!v) malformed(text, fmt::format("{} '{}' is not a whole number", what, part));
    return *v;
  };
  const auto arguments = [&](std::size_t lo, std::size_t hi) {
    const std::size_t n = parts.size() - 1;
    if (n < lo || n > hi) {
      malformed(text,
                fmt::format("{} takes {} value(s) after its name, got {}", kind,
                            lo == hi ? std::to_string(lo) : fmt::format("{} or {}", lo, hi), n));
    }
  };
  if (kind == "step") {
    arguments(1, 2);
    return std::make_shared<optim::StepLR>(count(parts[1], "the epochs between decays"),
                                           parts.size() > 2 ? number(2, "gamma") : 0.1);
  }
  if (kind == "multistep") {
    arguments(1, 2);
    std::vector<int> milestones;
    for (const std::string& m : split(parts[1], ',')) milestones.push_back(count(m, "milestone"));
    return std::make_shared<optim::MultiStepLR>(std::move(milestones),
                                                parts.size() > 2 ? number(2, "gamma") : 0.1);
  }
  if (kind == "exp") {
    arguments(1, 1);
    return std::make_shared<optim::ExponentialLR>(number(1, "gamma"));
  }
  if (kind == "cosine") {
    arguments(0, 1);
    return std::make_shared<optim::CosineAnnealingLR>(epochs,
                                                      parts.size() > 1 ? number(1, "eta_min") : 0);
  }
  malformed(text, fmt::format("'{}' is no schedule", kind));
}

}  // namespace

std::shared_ptr<const optim::LrSchedule> parse_lr_schedule(const std::string& text, int epochs,
                                                           int warmup_epochs) {
  std::shared_ptr<const optim::LrSchedule> schedule;
  if (!text.empty()) {
    const int after_warmup = epochs - warmup_epochs;
    if (text.starts_with("cosine") && after_warmup < 1) {
      throw Error(fmt::format(
          "[train] --lr-schedule {} anneals over the epochs after the warm-up, and --epochs {} "
          "with --warmup-epochs {} leaves none; train more epochs or warm up for fewer",
          text, epochs, warmup_epochs));
    }
    schedule = schedule_of(text, after_warmup);
  }
  if (warmup_epochs > 0) return optim::with_linear_warmup(warmup_epochs, std::move(schedule));
  return schedule;
}

const CLI::Validator kLrScheduleSyntax(
    [](std::string& text) -> std::string {
      try {
        (void)schedule_of(text, 1);  // the run's epochs are not known yet
      } catch (const Error& e) {
        // CLI11 puts "--lr-schedule: " before it: the option is not named twice.
        std::string message = e.what();
        const std::string named = "[train] --lr-schedule ";
        if (message.starts_with(named)) message.erase(0, named.size());
        return message;
      }
      return "";
    },
    "SCHEDULE");

}  // namespace tessera::tools
