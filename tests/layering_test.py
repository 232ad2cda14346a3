#!/usr/bin/env python3
"""The parts of cohort include only what they may (docs/design.md, "Parts").

Run by ctest as: /usr/bin/python3 tests/layering_test.py SOURCE_DIR

Reads every #include in src/ and fails, naming each offending line, when
  - a part includes a header of a part it must not depend on (PART_DEPS below). A part is a
    folder: src/store, src/launch, ..., and inside src/loop and src/cli each subfolder
    (loop/ensemble, loop/acquire, loop/config, loop/run, loop/schedule, loop/update, then loop
    itself; cli/base, cli/run, cli/data, cli/report, cli/ensemble, cli/member, then cli/main.cc).
    Inside loop a folder may use only the folders before it: an include that goes up or
    sideways fails;
  - a file includes libtorch (<torch/...>, <ATen/...>, <c10/...>) without being a source of
    the one target that links libtorch itself (cohort_model: network, checkpoint, tensors,
    trainer, evaluate) or the header of such a source;
  - a file of a target that does not link libtorch (the loop, the `cohort` CLI, the store,
    cohort_model_core, ...) includes a header of the libtorch side: one of those sources'
    headers, or model/member.h, the API cohort_model implements. Code that only describes
    training includes model/train_config.h.
Which targets link libtorch is read from every CMakeLists.txt under src/ (add_library, add_executable,
cohort_add_test, target_link_libraries), so moving a source between targets moves the rule.

Before checking the tree it checks itself on a small tree with known violations, so a rule
that silently stopped matching fails the test too.
"""
import os
import re
import sys
import tempfile

# What each part may include besides itself and the standard library. A part is a folder of
# src/ (its testing/ subfolder belongs to it); a file belongs to the deepest part its path is in.
# Dependencies point one way (docs/design.md, "Parts" and "The loop's tree"): inside loop/ each
# folder may use only the folders before it, and cli's subcommand folders never use one another.
_LOOP_BASE = {"common", "store", "launch", "model"}
PART_DEPS = {
    "common": set(),
    "store": {"common"},
    "launch": {"common"},
    "model": {"common", "store"},
    "worker": {"common", "store", "model", "launch"},
    "loop/ensemble": {"common", "store"},
    "loop/acquire": {"common", "store", "loop/ensemble"},
    "loop/config": _LOOP_BASE | {"loop/ensemble", "loop/acquire"},
    "loop/run": _LOOP_BASE | {"loop/ensemble", "loop/acquire", "loop/config"},
    "loop/schedule": _LOOP_BASE | {"loop/ensemble", "loop/acquire", "loop/config", "loop/run"},
    "loop/update": _LOOP_BASE | {"loop/ensemble", "loop/acquire", "loop/config", "loop/run",
                                 "loop/schedule"},
    "loop": _LOOP_BASE | {"loop/ensemble", "loop/acquire", "loop/config", "loop/run",
                          "loop/schedule", "loop/update"},
}
_LOOP_ALL = {p for p in PART_DEPS if p.startswith("loop")}
PART_DEPS.update({
    "cli/base": {"common"},
    "cli/run": _LOOP_BASE | _LOOP_ALL | {"cli/base"},
    "cli/data": {"common", "store", "cli/base"},
    "cli/report": {"common", "store", "model"} | _LOOP_ALL | {"cli/base"},
    "cli/ensemble": _LOOP_BASE | _LOOP_ALL | {"cli/base"},
    "cli/member": {"common", "store", "model", "worker", "launch", "cli/base"},
})
# cli/main.cc is the top: it may include any part.
PART_DEPS["cli"] = set(PART_DEPS)


def part_of(rel):
    """The part of a path under src/ ("loop/config/config.h" -> "loop/config"), or None."""
    folders = rel.split("/")[:-1]
    if "testing" in folders:
        folders = folders[:folders.index("testing")]
    while folders:
        name = "/".join(folders)
        if name in PART_DEPS:
            return name
        folders.pop()
    return None


TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s*<(torch|ATen|c10)/")
OUR_INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+/[a-z_/]+\.h)"')
# Headers of the libtorch side that have no source of their own: the functions member.h
# declares are defined in trainer.cc and evaluate.cc.
TORCH_API_HEADERS = {"src/model/member.h"}
# Header-only shims of the libtorch side (differences between libtorch releases): they include
# libtorch themselves, and only cohort_model's sources may include them.
TORCH_SHIM_HEADERS = {"src/model/torch_compat.h"}


def cmake_targets(root):
    """{target: (sources as paths from root, link items)} from every CMakeLists.txt in src/."""
    targets = {}
    src = os.path.join(root, "src")
    for folder, _, files in sorted(os.walk(src)):
        if "CMakeLists.txt" not in files:
            continue
        here = os.path.relpath(folder, root)
        with open(os.path.join(folder, "CMakeLists.txt")) as f:
            text = re.sub(r"#[^\n]*", "", f.read())
        for kind, args in re.findall(r"\b(add_library|add_executable|cohort_add_test|"
                                     r"target_link_libraries)\s*\(([^)]*)\)", text):
            words = args.split()
            name, rest = words[0], words[1:]
            sources, links = targets.setdefault(name, (set(), set()))
            if kind == "target_link_libraries":
                links.update(w for w in rest if w not in ("PUBLIC", "PRIVATE", "INTERFACE"))
                continue
            section = "SOURCES"
            for w in rest:
                if w in ("SOURCES", "LIBS"):
                    section = w
                elif section == "LIBS":
                    links.add(w)
                elif w.endswith(".cc"):
                    sources.add(os.path.normpath(os.path.join(here, w)))
    return targets


def torch_sides(targets):
    """(files that may include libtorch, files of targets that link it at all)."""
    direct = {t for t, (_, links) in targets.items() if "torch" in links}
    linked = set(direct)
    while True:
        more = {t for t, (_, links) in targets.items() if links & linked} - linked
        if not more:
            break
        linked |= more

    def with_headers(names):
        files = set()
        for t in names:
            for cc in targets[t][0]:
                files |= {cc, cc[:-3] + ".h"}
        return files

    return (with_headers(direct) | TORCH_SHIM_HEADERS,
            with_headers(linked) | TORCH_API_HEADERS | TORCH_SHIM_HEADERS)


def check(root):
    """Every violation in the tree at `root`, as 'path:line: message'."""
    may_include_torch, torch_side = torch_sides(cmake_targets(root))
    problems = []
    src = os.path.join(root, "src")
    for folder, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if not name.endswith((".h", ".cc")):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root)
            part = part_of(os.path.relpath(rel, "src"))
            if part is None:
                continue
            with open(os.path.join(folder, name), errors="replace") as f:
                lines = f.readlines()
            for number, line in enumerate(lines, 1):
                where = f"{rel}:{number}: "
                if TORCH_INCLUDE.match(line):
                    if rel not in may_include_torch:
                        problems.append(where + f"includes libtorch ({line.strip()}); only "
                                        "cohort_model's sources and their headers may")
                    continue
                m = OUR_INCLUDE.match(line)
                if not m:
                    continue
                header, other = f"src/{m.group(1)}", part_of(m.group(1))
                if other is None:
                    continue
                if other != part and other not in PART_DEPS[part]:
                    problems.append(where + f'includes "{m.group(1)}": {part} must not depend '
                                    f"on {other}")
                elif header in torch_side and rel not in torch_side:
                    hint = " (model/train_config.h has TrainConfig)" if header.endswith(
                        "/member.h") else ""
                    problems.append(where + f'includes "{m.group(1)}", a header of the libtorch '
                                    f"side, but its target does not link libtorch{hint}")
    return problems


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def self_test():
    """The rules catch each kind of violation in a small tree, and pass a clean one."""
    with tempfile.TemporaryDirectory() as root:
        write(root, "src/model/CMakeLists.txt",
              "add_library(cohort_model_core STATIC spec.cc)\n"
              "add_library(cohort_model STATIC network.cc)\n"
              "target_link_libraries(cohort_model PUBLIC cohort_model_core PRIVATE torch)\n")
        write(root, "src/worker/CMakeLists.txt",
              "add_library(cohort_worker STATIC worker.cc)\n"
              "target_link_libraries(cohort_worker PUBLIC cohort_model)\n")
        write(root, "src/loop/config/CMakeLists.txt",
              "add_library(cohort_loop_config STATIC config.cc)  # no torch\n"
              "cohort_add_test(config_test SOURCES config_test.cc LIBS cohort_loop_config)\n")
        write(root, "src/model/network.h", "#include <torch/torch.h>\n")
        write(root, "src/model/network.cc", '#include "model/network.h"\n#include <ATen/ATen.h>\n')
        write(root, "src/model/member.h", '#include "model/train_config.h"\n')
        write(root, "src/model/train_config.h", "#include <string>\n")
        write(root, "src/worker/worker.cc", '#include "model/member.h"\n')
        write(root, "src/loop/update/oracle.cc", '#include "loop/config/config.h"\n')
        write(root, "src/loop/config/testing/source_store.h", '#include "loop/acquire/seeds.h"\n')
        write(root, "src/cli/main.cc", '#include "cli/report/report.h"\n#include "loop/x.h"\n')
        clean = check(root)
        assert clean == [], clean
        write(root, "src/model/spec.cc", "#include <c10/util/Half.h>\n")
        write(root, "src/worker/worker.h", "#include <torch/torch.h>\n")
        write(root, "src/loop/config/config.h",
              '#include "model/member.h"\n#include "cli/base/run_cli.h"\n')
        write(root, "src/loop/config/config_test.cc", '#include "model/network.h"\n')
        write(root, "src/loop/ensemble/view.h", '#include "loop/update/oracle.h"\n')
        write(root, "src/loop/ensemble/testing/tables.h", '#include "loop/config/config.h"\n')
        write(root, "src/cli/report/report.cc", '#include "cli/ensemble/predict.h"\n')
        write(root, "src/model/spec.h", '#include "loop/config/config.h"\n#include "launch/device.h"\n')
        write(root, "src/common/status.h", '#include "store/env.h"\n')
        expected = [
            "src/cli/report/report.cc:1: includes \"cli/ensemble/predict.h\": cli/report must not "
            "depend on cli/ensemble",
            "src/common/status.h:1: includes \"store/env.h\": common must not depend on store",
            "src/loop/config/config.h:1: includes \"model/member.h\", a header of the libtorch side",
            "src/loop/config/config.h:2: includes \"cli/base/run_cli.h\": loop/config must not "
            "depend on cli/base",
            "src/loop/config/config_test.cc:1: includes \"model/network.h\", a header of the libtorch",
            "src/loop/ensemble/view.h:1: includes \"loop/update/oracle.h\": loop/ensemble must not "
            "depend on loop/update",
            "src/loop/ensemble/testing/tables.h:1: includes \"loop/config/config.h\": loop/ensemble "
            "must not depend on loop/config",
            "src/model/spec.cc:1: includes libtorch",
            "src/model/spec.h:1: includes \"loop/config/config.h\": model must not depend on "
            "loop/config",
            "src/model/spec.h:2: includes \"launch/device.h\": model must not depend on launch",
            "src/worker/worker.h:1: includes libtorch",
        ]
        found = check(root)
        assert len(found) == len(expected), "\n".join(found)
        for problem, start in zip(found, expected):
            assert problem.startswith(start), (problem, start)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: layering_test.py SOURCE_DIR")
    self_test()
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) break the layering (docs/design.md, \"Parts\")")
        sys.exit(1)
    print("layering: ok")


if __name__ == "__main__":
    main()
