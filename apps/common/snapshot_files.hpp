// SPDX-License-Identifier: Apache-2.0
#pragma once
// The programs' --snapshot and --trace options: where to write memory
// snapshots, and the writing, the format chosen by the file's name.

#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/snapshot_export.hpp>

#include <CLI/CLI.hpp>

#include <span>
#include <string>
#include <vector>

namespace cudapmr::apps {

/// The files the options name.
struct snapshot_files {
  std::vector<std::string> snapshots;
  std::string trace;

  [[nodiscard]] bool any() const noexcept { return !snapshots.empty() || !trace.empty(); }
};

/// Adds --snapshot FILE (repeatable) and --trace FILE; `when` says when they
/// are written ("after the replay").
inline void add_snapshot_options(CLI::App& app, snapshot_files& files, const std::string& when) {
  app.add_option("--snapshot", files.snapshots,
                 when + ", write the memory history and state to FILE: cudapmr's JSON where FILE ends in .json, else "
                        "PyTorch's memory snapshot pickle (python -m torch.cuda._memory_viz reads it); may be given "
                        "more than once")
      ->type_name("FILE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--trace", files.trace, when + ", write the memory history as a Chrome trace (JSON) to FILE")
      ->type_name("FILE");
}

/// Writes `stacks` to every file named: JSON or pickle by the snapshot's
/// name, the Chrome trace to the trace's.
/// \throws std::invalid_argument naming a file that cannot be written.
inline void write_snapshot_files(const snapshot_files& files, std::span<const memory_snapshot> stacks) {
  for (const std::string& path : files.snapshots)
    write_file(path, path.ends_with(".json") ? to_json(stacks) : to_pytorch_pickle(stacks));
  if (!files.trace.empty()) write_file(files.trace, to_chrome_trace(stacks));
}

}  // namespace cudapmr::apps
