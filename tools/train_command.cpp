#include "train_command.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_checks.h"
#include "lr_schedule_option.h"
#include "tessera/tessera.h"
#include "tessera/train/plot.h"

namespace tessera::tools {
namespace {

// `text` as one shell word: mkdir -p my dir made two directories. Plain when it is safe.
std::string shell_quoted(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-./+,:@%") == std::string::npos;
  if (plain) return text;
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct TrainArgs {
  std::string model = "mlp";
  int epochs = 10;
  std::int64_t batch_size = 256;
  std::int64_t prefetch =
      -1;               // batches gathered ahead on a background thread; -1: 2 with a GPU, else 0
  double lr = 0.1;      // LeNet: 0.05 unless given (see add_train_command)
  double momentum = 0;  // LeNet: 0.9 unless given
  std::string lr_schedule;  // --lr-schedule's text; empty: a constant lr
  int warmup_epochs = 0;
  std::string device;   // empty: try_gpu(), or the --num-gpus rule
  int num_gpus = -1;    // -1: not given
  std::string devices;  // "cpu:0,cpu:1": data-parallel on these
  std::uint64_t seed = 0;
  bool drop_last = false;  // the training data's short last batch
  std::string data_dir;
  std::string save, load, metrics, plot;
  std::string save_state, resume;  // the training state after every epoch; a run to continue
  double clip = 0;
  bool quiet = false;
  bool graph = false;
  std::string precision = "fp32";
};

// Device::parse of `text`, its error prefixed with the flag it came from: Device::parse
// alone named an empty device ('') for "cpu:0," without saying where it was.
Device parse_flag_device(const char* flag, const std::string& given, const std::string& text) {
  try {
    return Device::parse(text);
  } catch (const DeviceError& e) {
    throw DeviceError(fmt::format("[train] {} '{}': {}", flag, given, e.what()));
  }
}

// "cpu:0,cpu:1" -> the devices, each checked by Device::parse.
std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const Device d = parse_flag_device("--devices", list, list.substr(start, end - start));
    // In the command line's words (the Trainer's messages speak of its options and of
    // --device).
    for (const Device before : out) {
      if (before == d) {
        throw DeviceError(fmt::format(
            "[train] --devices lists {} twice; give each device once (e.g. cpu:0,cpu:1)", d.str()));
      }
      if (before.kind() != d.kind()) {
        throw DeviceError(fmt::format(
            "[train] --devices mixes {} and {}; list devices of one kind (cpu:0,cpu:1 or "
            "cuda:0,cuda:1)",
            before.str(), d.str()));
      }
    }
    if (!is_available(d)) {
      const std::string why = d.is_cuda() ? gpu_unavailable_reason()
                                          : "this process has fewer logical CPU devices (run "
                                            "with TESSERA_CPU_DEVICES=N)";
      std::string have;
      for (const Device a : available_devices()) have += (have.empty() ? "" : ",") + a.str();
      throw DeviceError(
          fmt::format("[train] --devices names {}, which is not available: {}. Available: {}",
                      d.str(), why, have));
    }
    out.push_back(d);
    start = end + 1;
  }
  return out;
}

// "cpu" or "cpu:0, cpu:1 data-parallel, 128 images per device per step".
std::string describe_devices(const std::vector<Device>& devices, int ranks, std::int64_t batch) {
  std::string names;
  for (Device d : devices) names += (names.empty() ? "" : ", ") + d.str();
  const auto k = static_cast<std::int64_t>(devices.size()) * ranks;
  if (k == 1) return names;
  const std::string share =
      batch % k == 0 ? std::to_string(batch / k) : fmt::format("{}-{}", batch / k, batch / k + 1);
  if (ranks == 1)
    return fmt::format("{} data-parallel, {} images per device per step", names, share);
  return fmt::format(
      "{} on each of {} ranks (mpirun), data-parallel, {} images per device per step", names, ranks,
      share);
}

// Refuses an output path that cannot be written, before any training: `flag` names the
// option. Checks the directory exists and is writable and that the path is not a directory.
void check_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  const fs::file_status dir_status = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw IOError(
        fmt::format("[train] {} '{}': cannot look up its directory '{}': {}. Choose "
                    "another path",
                    flag, path, dir.string(), ec.message()));
  }
  if (!fs::is_directory(dir_status)) {
    throw IOError(
        fmt::format("[train] {} '{}': the directory '{}' does not exist; create it "
                    "(mkdir -p {}) or choose another path. Nothing was trained",
                    flag, path, dir.string(), shell_quoted(dir.string())));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw IOError(
        fmt::format("[train] {} '{}': cannot write in the directory '{}': {}. Choose "
                    "another path. Nothing was trained",
                    flag, path, dir.string(), std::strerror(errno)));
  }
  const fs::file_status status = fs::status(p, ec);
  if (fs::is_directory(status)) {
    throw IOError(
        fmt::format("[train] {} '{}' is a directory; give a file name inside it. "
                    "Nothing was trained",
                    flag, path));
  }
  // An existing file is replaced in place by some writers (the chart), which its mode forbids.
  if (fs::exists(status) && ::access(p.c_str(), W_OK) != 0) {
    throw IOError(
        fmt::format("[train] {} '{}': cannot write the existing file: {}. Change its mode "
                    "(chmod u+w) or choose another path. Nothing was trained",
                    flag, path, std::strerror(errno)));
  }
}

// Every output file is checked before the first epoch, so a typo never throws a trained
// model away.
void check_outputs(const TrainArgs& a) {
  if (!a.plot.empty()) {
    const std::string ext = std::filesystem::path(a.plot).extension().string();
    if (ext != ".svg" && ext != ".png") {
      throw Error(
          fmt::format("[train] --plot '{}': charts are written as .svg or .png, got "
                      "'{}'; name the file .svg or .png. Nothing was trained",
                      a.plot, ext));
    }
  }
  check_output_path("--save", a.save);
  check_output_path("--plot", a.plot);
  check_output_path("--metrics", a.metrics);
  check_output_path("--save-state", a.save_state);
  // Two outputs in one file: the last written would silently replace the other (--save's
  // checkpoint over --save-state's training state, which --resume then refuses).
  const std::vector<std::pair<const char*, const std::string*>> files{
      {"--save", &a.save},
      {"--save-state", &a.save_state},
      {"--metrics", &a.metrics},
      {"--plot", &a.plot},
      {"--resume", &a.resume}};
  const auto same = [](const std::string& x, const std::string& y) {
    return std::filesystem::absolute(x).lexically_normal() ==
           std::filesystem::absolute(y).lexically_normal();
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    for (std::size_t j = i + 1; j < files.size(); ++j) {
      const auto& [flag_a, path_a] = files[i];
      const auto& [flag_b, path_b] = files[j];
      const bool resumed_state = std::string(flag_a) == "--save-state" &&
                                 std::string(flag_b) == "--resume";  // goes on writing it
      if (path_a->empty() || path_b->empty() || resumed_state || !same(*path_a, *path_b)) {
        continue;
      }
      throw Error(fmt::format(
          "[train] {} and {} both name '{}': one would overwrite the other. Give each its own "
          "file. Nothing was trained",
          flag_a, flag_b, *path_a));
    }
  }
}

// Built on the training device directly: no initialization on the host first.
nn::Sequential make_model(const std::string& name, Device device) {
  if (name == "softmax") return nn::models::softmax_regression(device);
  if (name == "mlp") return nn::models::mlp(256, device);
  if (name == "lenet") return nn::models::lenet(/*book=*/false, device);
  if (name == "lenet-bn") return nn::models::lenet_batch_norm(device);
  return nn::models::lenet(/*book=*/true, device);  // "lenet-book"; the CLI checks the names
}

void run_train(const TrainArgs& a) {
  // Before the data loads: a cosine schedule with no epochs to anneal over is refused now.
  const auto schedule = parse_lr_schedule(a.lr_schedule, a.epochs, a.warmup_epochs);
  manual_seed(a.seed);
  const data::FashionMnist d = data::load_fashion_mnist(
      a.data_dir.empty() ? data::default_fashion_mnist_dir() : std::filesystem::path(a.data_dir));
  data::DataLoader train_data(d.train_images, d.train_labels,
                              {.batch_size = a.batch_size,
                               .drop_last = a.drop_last,
                               .seed = a.seed,
                               .prefetch = a.prefetch});
  data::DataLoader test_data(d.test_images, d.test_labels,
                             {.batch_size = 1000, .shuffle = false, .prefetch = a.prefetch});

  train::TrainerOptions options{.max_epochs = a.epochs,
                                .num_gpus = a.num_gpus < 0 ? 0 : a.num_gpus,
                                .gradient_clip_val = a.clip,
                                .progress = !a.quiet,
                                .metrics_path = a.metrics,
                                .device = std::nullopt,
                                .devices = {},
                                .state_path = a.save_state,
                                .resume_from = a.resume,
                                .lr_schedule = schedule};
  options.graph = a.graph;
  options.precision = a.precision == "bf16"   ? kBFloat16
                      : a.precision == "fp16" ? kFloat16
                                              : kFloat32;
  // Under mpirun with several ranks, one model trains across them (Note [Data-parallel
  // steps]); each rank takes its own GPU by default (one process per GPU).
  const bool ranks = ProcessGroup::launched_size() > 1;
  if (!a.devices.empty()) {
    options.devices = parse_devices(a.devices);
  } else if (!a.device.empty()) {
    options.device = parse_flag_device("--device", a.device, a.device);
  } else if (a.num_gpus < 0) {
    options.device = ranks ? try_gpu(ProcessGroup::local_rank() % std::max(num_gpus(), 1))
                           : try_gpu();  // the default: the first GPU, else the CPU
  }
  const ProcessGroup* group = nullptr;
  if (ranks) {
    const bool on_gpus = !options.devices.empty() ? options.devices.front().is_cuda()
                         : options.device         ? options.device->is_cuda()
                                                  : options.num_gpus > 0 && num_gpus() > 0;
    group = &ProcessGroup::init(on_gpus ? ProcessBackend::kNccl : ProcessBackend::kMpi);
    options.process_group = group;
  }
  train::Trainer trainer(options);
  const bool lead = group == nullptr || group->rank() == 0;  // prints and writes files
  if (lead) check_outputs(a);  // before the first epoch; the other ranks write nothing

  // Built by factories, so data-parallel training can make a replica per device.
  const std::string model_name = a.model;
  const Device first = trainer.device();
  train::Classifier task(
      [model_name, first] {
        return std::make_shared<nn::Sequential>(make_model(model_name, first));
      },
      [lr = a.lr, momentum = a.momentum](const std::vector<Tensor>& params) {
        return std::make_unique<optim::SGD>(params,
                                            optim::SgdOptions{.lr = lr, .momentum = momentum});
      });
  nn::Module& net = task.model();
  if (!a.load.empty()) {
    // A file this command saved names its model: a mismatch is named before the shapes are.
    // (Training states from before their key was "model_layers" hold a layer listing there.)
    const auto meta = read_safetensors_header(a.load).metadata;
    if (const auto saved = meta.find("model"); saved != meta.end() && saved->second != a.model &&
                                               saved->second.find('(') == std::string::npos) {
      throw Error(fmt::format(
          "[train] --load {} holds a '{}' model (tessera train --model {} saved it), but "
          "--model is '{}'; pass --model {}",
          a.load, saved->second, saved->second, a.model, saved->second));
    }
    nn::load_checkpoint(net, a.load);
    std::cout << "loaded " << a.load << "\n";
  }
  // Read before the banner: a --resume file that is corrupt or no safetensors is refused
  // first, not after a line that says training starts. A safetensors file that is no training
  // state says nothing here: fit() refuses it, saying why.
  std::optional<std::string> resumed_epochs;
  if (lead && !a.resume.empty()) {
    const auto meta = read_safetensors_header(a.resume).metadata;
    if (const auto done = meta.find(train::kEpochKey); done != meta.end()) {
      resumed_epochs = done->second;
    }
  }
  const int world = group != nullptr ? group->size() : 1;
  if (lead) {
    std::cout << fmt::format(
        "training {} on {} for {} epochs (batch {}, lr {}{}, momentum {}, seed {}{}{})\n", a.model,
        describe_devices(trainer.devices(), world, a.batch_size), a.epochs, a.batch_size, a.lr,
        options.lr_schedule ? " scheduled by " + options.lr_schedule->str() : "", a.momentum,
        a.seed, a.graph ? ", recorded step replayed as a graph" : "",
        a.precision == "fp32" ? "" : fmt::format(", {} autocast", dtype_name(options.precision)));
  }
  if (resumed_epochs) {
    std::cout << fmt::format("resuming {} ({} of {} epochs done)\n", a.resume, *resumed_epochs,
                             a.epochs);
  }
  // The Trainer writes its epoch lines to stderr, unbuffered: these lines must come first
  // also when both streams go to one file.
  std::cout.flush();
  // Validated on the test set after each epoch, as the book does.
  const auto history = trainer.fit(task, train_data, &test_data);
  if (!lead) return;  // rank 0 reports and writes the files
  // Without --quiet the Trainer has already printed each epoch's line (on stderr).
  for (const auto& m : a.quiet ? history : std::vector<train::EpochMetrics>{}) {
    std::cout << fmt::format(
        "epoch {:>2}: train loss {:.4f}, train acc {:.4f}, test loss {:.4f}, test acc {:.4f} "
        "({:.2f} s)\n",
        m.epoch, m.train_loss, m.train_acc, m.val_loss, m.val_acc, m.seconds);
  }
  // Each output is written even when another fails; then the failures end the run.
  std::vector<std::string> failed;
  auto write_output = [&](const std::string& flag, const std::string& path,
                          const std::function<void()>& write) {
    if (path.empty()) return;
    try {
      write();
    } catch (const std::exception& e) {
      failed.push_back(fmt::format("{} {}: {}", flag, path, e.what()));
    }
  };
  write_output("--plot", a.plot, [&] {
    train::plot_history(history, a.plot, trainer.step_losses(),
                        fmt::format("{} on Fashion-MNIST ({})", a.model, trainer.device().str()));
    std::cout << "plotted " << a.plot << "\n";
  });
  const train::EpochMetrics test = trainer.evaluate(task, test_data);
  std::cout << fmt::format("test loss {:.4f}, test accuracy {:.4f}\n", test.val_loss, test.val_acc);
  write_output("--save", a.save, [&] {
    nn::save_checkpoint(net, a.save,
                        {{"model", a.model},
                         {"epochs", std::to_string(a.epochs)},
                         {"test_accuracy", fmt::format("{:.4f}", test.val_acc)}});
    std::cout << "saved " << a.save << "\n";
  });
  if (!failed.empty()) {
    std::string list;
    for (const std::string& f : failed) list += "\n  " + f;
    throw IOError(
        fmt::format("[train] {} of the outputs could not be written (the others "
                    "were):{}",
                    failed.size(), list));
  }
}

}  // namespace

namespace {

// Validators that say what was wrong in words (CLI11's ranges print the largest double).
// The whole text must be the number: "0.1abc" is refused here rather than by CLI11's
// conversion, whose message does not say what is expected.
std::optional<double> whole_number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return std::nullopt;
  return v;
}
const CLI::Validator kPositiveFinite(
    [](std::string& text) -> std::string {
      const auto v = whole_number(text);
      return v && std::isfinite(*v) && *v > 0 ? "" : "must be a positive number, got " + text;
    },
    "POSITIVE");
const CLI::Validator kFiniteNonNegative(
    [](std::string& text) -> std::string {
      const auto v = whole_number(text);
      return v && std::isfinite(*v) && *v >= 0
                 ? ""
                 : "must be a finite number >= 0 (0: off), got " + text;
    },
    "NONNEGATIVE");
const CLI::Validator kNotEmpty(
    [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; },
    "TEXT");
const CLI::Validator kUnsigned(
    [](std::string& text) -> std::string {
      const bool digits =
          !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) return "must be a whole number >= 0, got " + text;
      // Past 2^64 - 1 the conversion would clamp it silently: another seed than asked for.
      std::uint64_t value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size()) {
        return "must be at most 18446744073709551615 (2^64 - 1), got " + text;
      }
      text = std::to_string(value);  // in plain decimal: CLI11 reads a leading 0 as octal
      return "";
    },
    "UINT");

}  // namespace

void add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a classifier on Fashion-MNIST (Debian's dataset-fashion-mnist) and print its test "
      "accuracy. Defaults: an MLP on try_gpu() for 10 epochs");
  cmd->add_option(
         "--model", a->model,
         "softmax (softmax regression), mlp (784-256-10, ReLU), lenet (LeNet-5 with ReLU "
         "and max pooling), lenet-book (the book's LeNet: sigmoid, average pooling) or lenet-bn "
         "(the book's LeNet with batch normalization)")
      ->check(CLI::IsMember({"softmax", "mlp", "lenet", "lenet-book", "lenet-bn"}))
      ->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "Passes over the 60,000 training images")
      ->transform(cli::whole_number_in(0, 100000))
      ->capture_default_str();
  cmd->add_option("--batch-size", a->batch_size, "Images per step")
      ->transform(cli::whole_number_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--drop-last", a->drop_last,
                "Skip the training data's short last batch (60,000 images in batches of B leave "
                "60,000 % B), as the data-parallel steps need when it has fewer images than "
                "devices");
  cmd->add_option("--prefetch", a->prefetch,
                  "Batches gathered ahead of the step on a background thread (0: none, each "
                  "batch is gathered when the step needs it; default: 2 when there is a GPU, "
                  "else 0); the batches are the same either way")
      ->transform(cli::whole_number_in(0, 64));
  CLI::Option* lr = cmd->add_option("--lr", a->lr, "SGD learning rate (LeNet: 0.05)")
                        ->check(kPositiveFinite)
                        ->capture_default_str();
  cmd->add_option("--lr-schedule", a->lr_schedule, kLrScheduleHelp)->check(kLrScheduleSyntax);
  cmd->add_option("--warmup-epochs", a->warmup_epochs,
                  "Warm the lr up linearly first: epoch k of N trains at --lr * k / (N + 1), "
                  "then --lr-schedule starts (or the constant --lr)")
      ->transform(cli::whole_number_in(0, 100000));
  CLI::Option* momentum = cmd->add_option("--momentum", a->momentum, "SGD momentum (LeNet: 0.9)")
                              ->check(cli::number_in(0.0, 1.0))
                              ->capture_default_str();
  cmd->add_option("--device", a->device,
                  "Device to train on: cpu, cuda:0, cpu:1 (logical CPU devices) ... Default: "
                  "try_gpu(), the first GPU or else the CPU");
  CLI::Option* device = cmd->get_option("--device");
  device->check(kNotEmpty);
  CLI::Option* num_gpus =
      cmd->add_option("--num-gpus", a->num_gpus,
                      "Instead of --device: use the first min(N, num_gpus()) GPUs, the CPU when "
                      "0 (the book's Trainer(num_gpus=N)); two or more train data-parallel; "
                      "says so when fewer exist")
          ->transform(cli::whole_number_in(0, 64))
          ->excludes(device);
  cmd->add_option("--devices", a->devices,
                  "Train data-parallel on these devices of one kind, comma-separated: "
                  "cpu:0,cpu:1 (logical CPU devices) or cuda:0,cuda:1")
      ->check(kNotEmpty)
      ->excludes(device)
      ->excludes(num_gpus);
  cmd->add_option("--seed", a->seed,
                  "Seed of initialization and shuffling: a run repeats exactly with the same "
                  "threads and machine")
      ->transform(kUnsigned)
      ->capture_default_str();
  cmd->add_option("--data-dir", a->data_dir,
                  "Directory of the Fashion-MNIST IDX files (default: $TESSERA_DATA_DIR or "
                  "/usr/share/datasets/fashion-mnist)")
      ->check(kNotEmpty);
  cmd->add_option("--save", a->save, "Write the trained parameters to this safetensors file")
      ->check(kNotEmpty);
  CLI::Option* load =
      cmd->add_option("--load", a->load, "Start from the parameters in this safetensors file")
          ->check(kNotEmpty);
  cmd->add_option("--metrics", a->metrics, "Write per-epoch metrics as JSON lines to this file")
      ->check(kNotEmpty);
  cmd->add_option("--save-state", a->save_state,
                  "After every epoch, save the training state (parameters, optimizer state, "
                  "epochs done) to this safetensors file, for --resume")
      ->check(kNotEmpty);
  cmd->add_option("--resume", a->resume,
                  "Continue the run whose --save-state file this is, up to --epochs in all "
                  "(same model, batch size and optimizer options); --metrics is appended to")
      ->check(CLI::ExistingFile)
      ->excludes(load);
  cmd->add_option("--plot", a->plot,
                  "Draw train/test loss and test accuracy per epoch (and every step's loss) to "
                  "this .svg or .png file")
      ->check(kNotEmpty);
  cmd->add_option("--clip", a->clip, "Clip the global gradient norm to this (0: off)")
      ->check(kFiniteNonNegative);
  cmd->add_flag("--quiet", a->quiet, "No progress bar or per-epoch lines on stderr");
  cmd->add_flag("--graph", a->graph,
                "Record the training step once as a graph and replay it for every full batch "
                "(the same results, far less host work per step)");
  cmd->add_option("--precision", a->precision,
                  "fp32, or bf16 / fp16 to run matmul, linear and conv under autocast in "
                  "bfloat16 / float16 (softmax, the loss and the weights stay float32; fp16 "
                  "scales the loss and skips overflowed steps on the device)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->callback([a, lr, momentum] {
    // LeNet trains with momentum by default: plain SGD at 0.1 needs far more epochs.
    if (a->model.starts_with("lenet")) {
      if (lr->count() == 0) a->lr = 0.05;
      if (momentum->count() == 0) a->momentum = 0.9;
    }
    run_train(*a);
  });
}

}  // namespace tessera::tools
