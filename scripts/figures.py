#!/usr/bin/python3
"""The figures of kiln's docs, each checked against the recorded run it comes from.

    scripts/figures.py [check]          every figure in the docs against docs/runs/ (exit 1 on a mismatch)
    scripts/figures.py update           rewrite each marked figure from its run, and the generated tables
    scripts/figures.py list [PATTERN]   every figure's name, value, run and meaning
    scripts/figures.py self-test        the checker on a made-up tree (CTest docs_figures_self_test)
    scripts/figures.py record DIR NAME [--command CMD] [--machine TEXT]
                                        keep the files of a run (a device call's $OUT, results.tar.gz
                                        unpacked) as docs/runs/NAME, with run.json (date, machine,
                                        command, revision); the machines' own paths taken out

A recorded run is a folder of docs/runs/: the files the programs wrote (kernel-bench's JSON, mnist-train's
metrics, the logs) and run.json, which says when, where and how. docs/figures/*.py name each figure
the docs quote and says how it follows from a run's files: one definition, one source, however many
places quote it.

In the docs a figure is marked where it stands: `<!--fig NAME-->` right after it in Markdown, `[fig NAME]`
in a code comment. The number (or range `a-b`) just before the marker, its unit between them, is the
quote; it must equal the figure rounded to the decimals written (`0.95x` quotes 0.9512; `0.49-0.51 s`
a (low, high) figure). Tables that scripts write sit between `<!-- NAME: begin -->` and
`<!-- NAME: end -->` markers and are compared whole with what their script makes of the run.

Every number with a unit of measure (s, ms, µs, GB/s, TFLOP/s, images/s, %, x) in the checked files must
be a marked figure, inside a generated table, or followed the same way by `<!--nofig-->` / `[nofig]`
(a setting, a target or an estimate: not a measurement). The logs of how the code came to be (NOTES.md,
docs/*-notes.md) record past runs and are not checked.
"""
import argparse
import contextlib
import datetime
import glob
import importlib.util
import io
import json
import os
import re
import shutil
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, "docs", "runs")
FIGURES = os.path.join(ROOT, "docs", "figures")

# The files whose figures are checked; every kernel source's comments too.
DOCS = ["README.md", "docs/*.md", "kernels/README.md", "apps/*/README.md"]
SOURCES = ["kernels/**/*.cu", "kernels/**/*.cuh", "kernels/**/*.h", "kernels/**/*.cpp", "kernels/vulkan/shaders/*.comp",
           "kernels/vulkan/shaders/*.glsl", "apps/bench/*.cpp", "apps/bench/*.cu", "apps/bench/*.h"]
NOT_CHECKED = re.compile(r"(^|/)NOTES\.md$|-notes\.md$")  # the dated logs

MARK = re.compile(r"<!--fig ([\w.\-]+)-->|\[fig ([\w.\-]+)\]")
NOFIG = re.compile(r"<!--nofig-->|\[nofig\]")
NUMBER = r"\d[\d,]*(?:\.\d+)?"
# the quote before a marker: a number or a range, then its unit (letters, %, ×, µ, /, ^, *, spaces)
QUOTE = re.compile(rf"({NUMBER})(?:\s*[-–]\s*({NUMBER}))?([\sA-Za-zµ%×/^*]{{0,14}})$")
# a measurement's unit after a number
MEASURE = re.compile(rf"(?<![\w.^/-])({NUMBER})(?:\s*[-–]\s*{NUMBER})?(?:\s?(?:ms|µs|us|s|GB/s|TB/s|TFLOP/s|GFLOP/s|"
                     r"img/s|images/s|%)|[x×](?!\s*\d))(?![\w/])")  # 1.4x is a ratio, 8 x 8 a shape
BEGIN = re.compile(r"<!-- ([\w\-]+): begin -->")


class Run:
    """One recorded run: docs/runs/NAME/run.json and the files beside it."""

    def __init__(self, name):
        self.name = name
        self.path = os.path.join(RUNS, name)
        with open(os.path.join(self.path, "run.json")) as f:
            self.meta = json.load(f)
        self._cache = {}

    def file(self, name):
        return os.path.join(self.path, name)

    def json(self, name):
        if name not in self._cache:
            with open(self.file(name)) as f:
                self._cache[name] = json.load(f)
        return self._cache[name]

    def jsonl(self, name):
        if name not in self._cache:
            with open(self.file(name)) as f:
                self._cache[name] = [json.loads(line) for line in f if line.strip()]
        return self._cache[name]

    def text(self, name):
        with open(self.file(name), encoding="utf-8", errors="replace") as f:
            return f.read()

    # kernel-bench --json: the row of one family, version and shape
    def kernel(self, family, version, shape, file="kernels.json"):
        rows = [r for r in self.json(file)["results"]
                if r["family"] == family and r["version"] == version and r["shape"] == shape]
        if len(rows) != 1:
            raise KeyError(f"{self.name}/{file}: {len(rows)} rows of {family} {version} {shape}")
        return rows[0]

    # a row's figure as a percentage of its yardstick, as kernels/README.md's "vs yardstick" column has
    # it (scripts/kernel_table.py: the copy bandwidth for GB/s rows, the same shape's reference else)
    def kernel_share(self, family, version, shape, file="kernels.json"):
        import kernel_table
        rows = self.json(file)["results"]
        copy = next((r["value"] for r in rows if r["family"] == "copy"), None)
        row = self.kernel(family, version, shape, file)
        value, _ = kernel_table.yardstick(row, rows, copy)
        return 100 * row["value"] / value

    # mnist-train --metrics-out: the epochs' lines ({"epoch", "seconds", "test_accuracy", ...})
    def epochs(self, file):
        return [r for r in self.jsonl(file) if r.get("type") == "epoch"]

    def epoch(self, file, n):
        return next(r for r in self.epochs(file) if r["epoch"] == n)

    # the part of device-run.log that one command wrote (its "== COMMAND" line and output)
    def log_block(self, command_part, log="device-run.log"):
        blocks = [b for b in self.text(log).split("\n== ") if command_part in b.splitlines()[0]]
        if len(blocks) != 1:
            raise KeyError(f"{self.name}/{log}: {len(blocks)} commands with {command_part!r}")
        return re.sub(r"\x1b\[[0-9;]*m", "", blocks[0])  # without the terminal's colours

    # mnist-train's last console line: "best test accuracy A%  total T s ..."
    def total_seconds(self, command_part):
        return float(re.search(r"total ([\d.]+) s", self.log_block(command_part)).group(1))

    # doctest's summary: (test cases passed, assertions passed)
    def doctest(self, command_part):
        block = self.log_block(command_part)
        cases = re.search(r"test cases:\s*\d+\s*\|\s*(\d+) passed", block)
        asserts = re.search(r"assertions:\s*\d+\s*\|\s*(\d+) passed", block)
        return int(cases.group(1)), int(asserts.group(1))

    # vulkan-bench --json: the row of one section and name
    def vulkan(self, section, name, file="vulkan.json"):
        rows = [r for r in self.json(file)["results"] if r["section"] == section and r["name"] == name]
        if len(rows) != 1:
            raise KeyError(f"{self.name}/{file}: {len(rows)} rows of {section} {name}")
        return rows[0]

    # JSON lines (dist-bench, bench_ddp_torch.py, bench_mnist_torch.py): the lines with these fields
    def lines(self, file, **fields):
        return [r for r in self.jsonl(file) if all(r.get(k) == v for k, v in fields.items())]

    def line(self, file, **fields):
        rows = self.lines(file, **fields)
        if len(rows) != 1:
            raise KeyError(f"{self.name}/{file}: {len(rows)} lines with {fields}")
        return rows[0]


class Figure:
    def __init__(self, name, run, value, what):
        self.name, self.run, self.value, self.what = name, run, value, what

    def values(self):
        return self.value if isinstance(self.value, tuple) else (self.value,)


def load_runs():
    return {n: Run(n) for n in sorted(os.listdir(RUNS)) if os.path.isfile(os.path.join(RUNS, n, "run.json"))}


def load_figures(runs):
    """The figures and tables that docs/figures/*.py define, by name."""
    figures, tables = {}, {}

    def figure(name, run, value, what):
        if name in figures:
            raise SystemExit(f"docs/figures: figure {name} defined twice")
        figures[name] = Figure(name, run, value, what)

    def table(name, make):
        if name in tables:
            raise SystemExit(f"docs/figures: table {name} defined twice")
        tables[name] = make

    sys.path.insert(0, os.path.join(ROOT, "scripts"))  # the table scripts (kernel_table.py, ...)
    for path in sorted(glob.glob(os.path.join(FIGURES, "*.py"))):
        spec = importlib.util.spec_from_file_location("kiln_figures_" + os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.define(figure, table, runs)
    return figures, tables


def files():
    out = []
    for pattern in DOCS + SOURCES:
        out += sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True))
    return [f for f in dict.fromkeys(out) if not NOT_CHECKED.search(f)]


def decimals(text):
    return len(text.split(".")[1]) if "." in text else 0


def formatted(value, like):
    text = f"{value:.{decimals(like)}f}"
    if "," in like:
        whole, _, frac = text.partition(".")
        text = f"{int(whole):,}" + (f".{frac}" if frac else "")
    return text


def matches(value, text):
    return formatted(value, text) == text


def check_line(path, number, line, figures, update, problems):
    """Checks (or rewrites) the marked figures of one line; returns the line."""
    out, last = [], 0
    for m in MARK.finditer(line):
        name = m.group(1) or m.group(2)
        before = line[last:m.start()]
        where = f"{os.path.relpath(path, ROOT)}:{number}"
        fig = figures.get(name)
        q = QUOTE.search(before)
        if fig is None:
            problems.append(f"{where}: no figure named {name} in docs/figures/")
        elif q is None:
            problems.append(f"{where}: no number before the marker of {name}")
        else:
            quoted = [t for t in (q.group(1), q.group(2)) if t]
            vals = fig.values()
            if len(quoted) != len(vals):
                problems.append(f"{where}: {name} is {len(vals)} number(s), the text quotes {len(quoted)}")
            elif update:
                start = q.start()
                new = formatted(vals[0], quoted[0])
                rest = before[q.start(1) + len(quoted[0]):]
                if len(quoted) == 2:
                    second = rest.index(quoted[1])
                    rest = rest[:second] + formatted(vals[1], quoted[1]) + rest[second + len(quoted[1]):]
                before = before[:start] + new + rest
            else:
                for t, v in zip(quoted, vals):
                    if not matches(v, t):
                        problems.append(f"{where}: {name} is {formatted(v, t)} ({fig.what}; run {fig.run.name}), "
                                        f"the text says {t}")
        out.append(before + m.group(0))
        last = m.end()
    out.append(line[last:])
    return "".join(out)


def unmarked(line, code):
    """The measurements of a line that no marker claims."""
    if code:
        i = line.find("//")
        if i < 0:
            return []
        line = line[i:]
    claimed = set()
    for m in list(MARK.finditer(line)) + list(NOFIG.finditer(line)):
        q = QUOTE.search(line[:m.start()])
        if q:
            claimed.add(q.start(1))
    return [m.group(0) for m in MEASURE.finditer(line) if m.start(1) not in claimed]


def process(path, figures, tables, update, problems):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code = not path.endswith(".md")
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        begin = BEGIN.search(line)
        if begin and not code:
            name = begin.group(1)
            end = next((j for j in range(i + 1, len(lines)) if f"<!-- {name}: end -->" in lines[j]), None)
            where = f"{os.path.relpath(path, ROOT)}:{i + 1}"
            if end is None:
                problems.append(f"{where}: <!-- {name}: begin --> without its end")
                out.append(line)
                i += 1
                continue
            if name not in tables:
                problems.append(f"{where}: no table named {name} in docs/figures/")
                out += lines[i:end + 1]
            else:
                made = tables[name]().rstrip("\n").split("\n")
                if lines[i + 1:end] != made:
                    if update:
                        pass
                    else:
                        problems.append(f"{where}: the table {name} differs from what its script makes of the run "
                                        f"(scripts/figures.py update rewrites it)")
                out += [line] + (made if update else lines[i + 1:end]) + [lines[end]]
            i = end + 1
            continue
        line = check_line(path, i + 1, line, figures, update, problems)
        for figure in unmarked(line, code):
            problems.append(f"{os.path.relpath(path, ROOT)}:{i + 1}: {figure.strip()!r} is not a marked figure "
                            f"(mark it <!--fig NAME--> / [fig NAME], or <!--nofig--> if it measures nothing)")
        out.append(line)
        i += 1
    new = "\n".join(out)
    if update and new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"updated {os.path.relpath(path, ROOT)}")


def check(update):
    runs = load_runs()
    figures, tables = load_figures(runs)
    problems = []
    for path in files():
        process(path, figures, tables, update, problems)
    quoted = set()
    for path in files():
        with open(path, encoding="utf-8") as f:
            quoted |= {m.group(1) or m.group(2) for m in MARK.finditer(f.read())}
    problems += [f"docs/figures: {name} is defined but quoted nowhere" for name in sorted(set(figures) - quoted)]
    for run in runs.values():  # the machines' own paths stay out of the repo (record takes them out)
        for n in sorted(os.listdir(run.path)):
            with open(run.file(n), encoding="utf-8", errors="replace") as f:
                if ROOT + "/" in f.read():
                    problems.append(f"docs/runs/{run.name}/{n} names {ROOT}/ (scripts/figures.py record removes it)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) with the docs' figures")
        return 1
    print(f"{len(figures)} figures from {len(runs)} recorded runs, every quote checked")
    return 0


def list_figures(pattern):
    runs = load_runs()
    figures, _ = load_figures(runs)
    for f in figures.values():
        if pattern and pattern not in f.name:
            continue
        value = " - ".join(f"{v:.4g}" for v in f.values())
        print(f"{f.name:48s} {value:>16s}  {f.run.name}: {f.what}")
    return 0


def scrub_paths(folder):
    """Takes the machines' own paths out of a run's files: the checkout's root (here, and wherever a
    log names .device/ under it), the folder the files were written to (a path ending in one of their
    names: "$OUT/"), and mktemp's folders ("$TMP")."""
    names = [n for n in os.listdir(folder) if n != "run.json"]
    for n in names:
        path = os.path.join(folder, n)
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
        new = text.replace(ROOT + "/", "")
        new = re.sub(r"/[^\s'\"()]+?/(?=\.device/)", "", new)
        for other in names:
            new = re.sub(r"/[^\s'\"()]+/(?=" + re.escape(other) + r"\b)", "$OUT/", new)
        new = re.sub(r"/tmp/tmp\.[A-Za-z0-9]+", "$TMP", new)
        if new != text:
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(new)


def record(source, name, command, machine):
    dest = os.path.join(RUNS, name)
    if os.path.exists(dest):
        raise SystemExit(f"record: {os.path.relpath(dest, ROOT)} exists; a recorded run is never rewritten")
    os.makedirs(dest)
    for entry in sorted(os.listdir(source)):
        path = os.path.join(source, entry)
        if entry == "results.tar.gz":
            with tarfile.open(path) as tar:
                tar.extractall(dest, filter="data")
        elif os.path.isfile(path):
            shutil.copy(path, dest)
    scrub_paths(dest)
    meta = {"name": name}
    command_file = os.path.join(dest, "command.txt")
    meta["command"] = command or (open(command_file).read().strip() if os.path.exists(command_file) else None)
    gpu_file = os.path.join(dest, "gpu.txt")
    if machine:
        meta["machine"] = machine
    elif os.path.exists(gpu_file):
        gpus = [line.strip() for line in open(gpu_file) if line.strip()]
        meta["machine"] = f"{len(gpus)} x {gpus[0]} (name, driver, memory)" if gpus else None
    # the date and revision that the programs' own JSON recorded
    dates, revisions = set(), set()
    for f in sorted(os.listdir(dest)):
        if not f.endswith((".json", ".jsonl")):
            continue
        with open(os.path.join(dest, f)) as fh:
            rows = [json.load(fh)] if f.endswith(".json") else [json.loads(x) for x in fh if x.strip()]
        for r in rows:
            if r.get("date"):
                dates.add(r["date"])
            if r.get("revision"):
                revisions.add(r["revision"])
    meta["date"] = min(dates) if dates else datetime.date.today().isoformat()
    meta["revision"] = sorted(revisions)
    with open(os.path.join(dest, "run.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"recorded {os.path.relpath(dest, ROOT)}: {json.dumps(meta)}")
    return 0


def self_test():
    """The checker on a made-up tree: a right, a wrong and an unmarked figure, a range, a stale table."""
    import tempfile
    global ROOT, RUNS, FIGURES, DOCS, SOURCES
    saved = ROOT, RUNS, FIGURES, DOCS, SOURCES
    with tempfile.TemporaryDirectory() as root:
        ROOT, RUNS, FIGURES = root, os.path.join(root, "docs", "runs"), os.path.join(root, "docs", "figures")
        DOCS, SOURCES = ["README.md"], ["kernels/*.cu"]
        os.makedirs(os.path.join(RUNS, "r"))
        os.makedirs(FIGURES)
        os.makedirs(os.path.join(root, "kernels"))
        with open(os.path.join(RUNS, "r", "run.json"), "w") as f:
            json.dump({"name": "r", "date": "2026-01-01", "machine": "m", "command": "c", "revision": []}, f)
        with open(os.path.join(RUNS, "r", "train.jsonl"), "w") as f:
            f.write('{"type":"epoch","epoch":1,"seconds":0.5071}\n{"type":"epoch","epoch":2,"seconds":0.6268}\n')
        with open(os.path.join(FIGURES, "f.py"), "w") as f:
            f.write("def define(figure, table, runs):\n"
                    "    r = runs['r']\n"
                    "    s = [e['seconds'] for e in r.epochs('train.jsonl')]\n"
                    "    figure('epoch1', r, s[0], 'first epoch, s')\n"
                    "    figure('epochs', r, (min(s), max(s)), 'epochs, s')\n"
                    "    table('t', lambda: '| a |\\n| 1 |')\n")
        readme = ("one epoch: **0.507 s**<!--fig epoch1-->, all: 0.51-0.63 s<!--fig epochs-->\n"
                  "wrong: 0.52 s<!--fig epoch1-->; unmarked: 3.5 ms; a setting: 40 s<!--nofig-->; 8 x 8 tiles\n"
                  "<!-- t: begin -->\n| a |\n| 2 |\n<!-- t: end -->\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(readme)
        with open(os.path.join(root, "kernels", "k.cu"), "w") as f:
            f.write("// took 0.51 s [fig epoch1], 1.4x faster\ndouble ms = 2.5 * x;  // in code, not a figure\n")
        runs = load_runs()
        figures, tables = load_figures(runs)
        problems = []
        for path in files():
            process(path, figures, tables, False, problems)
        expected = ["README.md:2: epoch1 is 0.51", "README.md:2: '3.5 ms' is not", "README.md:3: the table t differs",
                    "kernels/k.cu:1: '1.4x' is not"]
        for e in expected:
            assert any(p.startswith(e) for p in problems), (e, problems)
        assert len(problems) == len(expected), problems
        with contextlib.redirect_stdout(io.StringIO()):  # its "updated" lines name the made-up files
            for path in files():
                process(path, figures, tables, True, [])
        with open(os.path.join(root, "README.md")) as f:
            fixed = f.read()
        assert "wrong: 0.51 s<!--fig epoch1-->" in fixed and "| 1 |" in fixed and "0.51-0.63 s" in fixed, fixed
    ROOT, RUNS, FIGURES, DOCS, SOURCES = saved
    print("self-test: a wrong figure, an unmarked one and a stale table found; update fixes the first and the last")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what")
    sub.add_parser("check")
    sub.add_parser("update")
    sub.add_parser("self-test")
    p = sub.add_parser("list")
    p.add_argument("pattern", nargs="?")
    p = sub.add_parser("record")
    p.add_argument("source")
    p.add_argument("name")
    p.add_argument("--command")
    p.add_argument("--machine")
    args = parser.parse_args()
    if args.what == "list":
        return list_figures(args.pattern)
    if args.what == "self-test":
        return self_test()
    if args.what == "record":
        return record(args.source, args.name, args.command, args.machine)
    return check(args.what == "update")


if __name__ == "__main__":
    sys.exit(main())
