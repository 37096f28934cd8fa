#!/usr/bin/python3
"""Run after each build of a test binary (kiln_add_test in cmake/KilnHelpers.cmake): writes the CTest
file that registers each doctest case of the binary as a test of its own, named "NAME: case name",
so that ctest lists every case and a failure names it.

Each test runs its case alone (--test-case, with the commas of the name escaped) under LABEL. The
exit code 77 of a case that skips itself (tests/skip.h) reads as skipped. Cases of the doctest suite
"slow" also get the label slow, and cases of each SUITE=EXTRA pair get the label EXTRA.

    kiln_list_tests.py BINARY NAME LABEL OUT [SUITE=EXTRA...]
"""
import subprocess
import sys


def cases(binary, *filters):
    run = subprocess.run([binary, "--list-test-cases", *filters], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{binary} --list-test-cases {' '.join(filters)} failed ({run.returncode}): {run.stderr}")
    return [line for line in run.stdout.splitlines()
            if line and not line.startswith("[doctest]") and not set(line) <= {"="}]


def bracket(text):
    """A CMake bracket argument holding `text` as it is."""
    level = "=" * next(n for n in range(1, 100) if f"]{'=' * n}]" not in text)
    return f"[{level}[{text}]{level}]"


def main():
    binary, name, label, out, *suite_labels = sys.argv[1:]
    names = cases(binary)
    if not names:
        sys.exit(f"{binary} lists no test case")
    extra = {}
    for pair in ["slow=slow", *filter(None, suite_labels)]:
        suite, extra_label = pair.split("=", 1)
        for case in cases(binary, f"--test-suite={suite}"):
            extra.setdefault(case, []).append(extra_label)
    lines = []
    for case in names:
        test = bracket(f"{name}: {case}")
        labels = ";".join(dict.fromkeys([label, *extra.get(case, [])]))
        lines.append(f"add_test({test} {bracket(binary)} {bracket('--test-case=' + case.replace(',', chr(92) + ','))})")
        lines.append(f"set_tests_properties({test} PROPERTIES LABELS {bracket(labels)} SKIP_RETURN_CODE 77)")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
