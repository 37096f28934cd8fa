#!/usr/bin/python3
"""The README's commands against the program (CTest readme_commands, label cpu).

    tests/readme/check_readme.py --build BUILD [--data DIR]

Two checks:
1. The option lists that the README gives for mnist-train and mnist-predict must hold exactly the
   flags that the program's --help lists.
2. Every command in the README's `sh` blocks, and in the "command" column of its tables, is run
   here, checked, covered (another test or CI stage runs it, named), or skipped for a stated reason. An mnist-train command is run as written,
   capped to a small run (1 epoch, 640 training and 500 test images) so that the suite stays fast.
   A --device cuda run on a machine without a GPU must stop with the error that names the missing
   device, which shows its flags parsed. A scripts/ command must name a script that exists. A
   cmake or ctest command must name presets and targets that exist. A command that matches no
   rule fails the check, so a new kind of command in the README needs a rule here.
Prints one line per command and exits 1 if any check fails.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
CAPS = {"--epochs": "1", "--limit-train": "640", "--limit-test": "500"}


def readme_blocks(text):
    """(language, body) of each fenced block."""
    return re.findall(r"```(\w*)\n(.*?)```", text, re.S)


def commands(text):
    """The commands of the sh blocks (comments cut, continuations joined, && split) and of the
    tables' command column."""
    found = []
    for lang, body in readme_blocks(text):
        if lang != "sh":
            continue
        body = body.replace("\\\n", " ")
        for line in body.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                found += [part.strip() for part in line.split("&&")]
    column = None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "command" in cells:
            column = cells.index("command")
        elif column is not None and len(cells) > column and not set(cells[column]) <= set("-: "):
            found += re.findall(r"`([^`]+)`", cells[column])[:1]
    return found


def listing_flags(text):
    """The flags that a listing of options defines: those in each line's first column (up to the
    first run of two spaces), as --help and the README's option lists both write them."""
    flags = set()
    for line in text.splitlines():
        column = re.split(r"\s{2,}", line.strip())[0]
        if column.startswith("-"):
            flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])\b", column))
    return flags - {"-h", "--help"}


def help_flags(program):
    return listing_flags(subprocess.run([program, "--help"], capture_output=True, text=True).stdout)


class Checker:
    def __init__(self, build, data):
        self.build, self.data, self.failed = build, data, False
        with open(os.path.join(ROOT, "CMakePresets.json")) as f:
            presets = json.load(f)
        self.presets = {p["name"] for kind in ("configurePresets", "buildPresets", "testPresets")
                        for p in presets.get(kind, [])}
        self.work = tempfile.mkdtemp(prefix="kiln-readme-")

    def say(self, status, command, why):
        print(f"{status:8} {command}\n         {why}")
        self.failed |= status == "FAILED"

    def binary(self, name):
        return os.path.join(self.build, "apps", "mnist", name)

    def run_mnist_train(self, command, words):
        args = words[1:]
        for flag, value in CAPS.items():
            if flag in args:
                i = args.index(flag)
                if flag == "--epochs" or int(args[i + 1]) > int(value):
                    args[i + 1] = value
            else:
                args += [flag, value]
        if "--data" not in args:
            args += ["--data", self.data]
        args = [a.replace("out/", self.work + "/out/") for a in args]
        run = subprocess.run([self.binary("mnist-train"), *args], capture_output=True, text=True, timeout=600)
        said = run.stdout + run.stderr
        if run.returncode == 0 and "best test accuracy" in said:
            return self.say("ran", command, "capped: " + " ".join(args))
        if "--device" in args and run.returncode == 1 and re.search(r"(cuda|vulkan)\S*[: ].*\b(no|not)\b", said, re.I):
            device = args[args.index("--device") + 1]
            return self.say("checked", command, f"flags parsed; no {device} device here: {said.strip().splitlines()[-1]}")
        if "no MNIST" in said and not os.environ.get("CI") == "true":
            return self.say("skipped", command, "no MNIST files here (scripts/setup fetches them)")
        self.say("FAILED", command, f"exit {run.returncode}: {said.strip()[-600:]}")

    def check(self, command):
        words = shlex.split(command)
        head = words[0]
        if head == "mnist-train":
            if words[1:] == ["--version"]:
                run = subprocess.run([self.binary(head), "--version"], capture_output=True, text=True)
                return self.say("ran" if run.returncode == 0 else "FAILED", command, run.stdout.strip())
            return self.run_mnist_train(command, words)
        if head == "mpirun":
            if not shutil.which("mpirun"):
                return self.say("skipped", command, "no mpirun here")
            if "-H" in words:
                return self.say("skipped", command, "runs on the machines it names")
            program = next(w for w in words if w.endswith("mnist-train"))
            rest = words[words.index(program) + 1:]
            if "cuda" in rest:
                return self.run_mnist_train(command, ["mnist-train", *rest])
            launcher = [w for w in words[:words.index(program)]]
            if os.geteuid() == 0:
                launcher.insert(1, "--allow-run-as-root")
            run = subprocess.run([*launcher, self.binary("mnist-train"), *rest, *sum(([k, v] for k, v in CAPS.items()), []),
                                  "--data", self.data], capture_output=True, text=True, timeout=600)
            ok = run.returncode == 0 and "best test accuracy" in run.stdout
            return self.say("ran" if ok else "FAILED", command, "capped" if ok else (run.stdout + run.stderr)[-600:])
        if head == "scripts/train" and len(words) > 1:  # its arguments go to mnist-train
            return self.run_mnist_train(command, ["mnist-train", *words[1:]])
        if head.startswith("scripts/"):
            path = os.path.join(ROOT, head)
            ok = os.path.isfile(path) and os.access(path, os.X_OK)
            return self.say("checked" if ok else "FAILED", command,
                            "the script exists (its runs: CI's stages, and the device)" if ok else "no such script")
        if head.startswith("test_"):
            path = os.path.join(self.build, "tests", head)
            ok = os.path.isfile(path) and subprocess.run([path, *words[1:], "--list-test-cases"],
                                                         capture_output=True).returncode == 0
            return self.say("checked" if ok else "FAILED", command,
                            "the test binary exists and takes these arguments" if ok else "no such test binary here")
        if words[:2] == ["cmake", "--install"]:
            return self.say("covered", command, "by the test install_and_build_example, which installs a build and uses it")
        if head in ("cmake", "ctest"):
            named = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--preset"]
            missing = [p for p in named if p not in self.presets]
            if "--target" in words and words[words.index("--target") + 1] not in ("docs",):
                missing.append("target " + words[words.index("--target") + 1])
            if missing:
                return self.say("FAILED", command, "no such preset or target: " + ", ".join(missing))
            return self.say("checked", command, "presets and targets exist (scripts/test builds them)")
        if head in ("sudo", "man", "c++"):
            return self.say("covered", command, "by scripts/package --check, CI's stage deb")
        if head.startswith("SPDLOG_LEVEL="):
            return self.say("covered", command, "an example; test_mnist_train's \"stderr is spdlog's\" runs mnist-train so")
        if head == "kernel-bench":
            return self.say("skipped", command, "needs a GPU: scripts/device-run bench runs it")
        if head == "vulkan-bench":
            return self.say("skipped", command, "ten minutes on lavapipe: scripts/device-run vulkan runs it")
        self.say("FAILED", command, "no rule for this command in tests/readme/check_readme.py")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--data", default=os.environ.get("KILN_DATA", os.path.join(ROOT, "data", "mnist")))
    args = parser.parse_args()
    with open(README, encoding="utf-8") as f:
        text = f.read()
    checker = Checker(os.path.abspath(args.build), os.path.abspath(args.data))

    for program in ("mnist-train", "mnist-predict"):
        body = next(b for lang, b in readme_blocks(text) if lang == "" and b.startswith(program))
        want, have = listing_flags(body), help_flags(checker.binary(program))
        if want == have:
            checker.say("checked", f"{program} options", f"the README lists the {len(have)} flags of --help")
        else:
            checker.say("FAILED", f"{program} options",
                        f"in --help, not the README: {sorted(have - want)}; in the README, not --help: {sorted(want - have)}")
    for command in commands(text):
        checker.check(command)
    return 1 if checker.failed else 0


if __name__ == "__main__":
    sys.exit(main())
