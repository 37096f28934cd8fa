#!/usr/bin/python3
"""Doxygen's INPUT_FILTER for kiln's public headers (docs/CMakeLists.txt): reads a header, prints it
as Doxygen should see it. The file on disk is not changed.

kiln's headers are commented in plain `//` lines, written to be read in the source. This filter
turns them into Doxygen's form:
- The comment block at the top of the file becomes the file's documentation (`\\file`).
- A block of `//` lines directly above a declaration becomes that declaration's documentation
  (a `/** ... */` block).
- A `//` comment after code on the same line becomes a trailing member comment (`///<`).
Each block is kept verbatim: shapes such as `[N, C, H, W]`, `<kiln/...>` and `x^2` show as written
and never trip Doxygen's markup.
Every line of the file stays on its own line, so Doxygen's line numbers match the header.

    docs/doxygen_filter.py core/tensor.h
"""
import re
import sys

COMMENT = re.compile(r"^(\s*)// ?(.*)$")
TRAILING = re.compile(r"^(\s*[^/\s].*?[;,{}])(\s+)// (.*)$")


def doc_block(lines, indent, tail=""):
    """A verbatim Doxygen block, a line per source line; `tail` ends its last line. A C-style block
    of bare lines: inside \\verbatim, Doxygen keeps every line's /// or * after the first."""
    lines = [text.replace("*/", "* /") for text in lines]  # would end the block
    out = [f"{indent}{text}" for text in lines]
    out[0] = f"{indent}/** \\verbatim {lines[0]}"
    out[-1] += " \\endverbatim" + tail + " */"
    return out


def filter_header(source):
    lines = source.split("\n")
    out = []
    i = 0
    first_block = True
    while i < len(lines):
        m = COMMENT.match(lines[i])
        if not m:
            t = TRAILING.match(lines[i])
            if t and '"' not in t.group(1):
                out.append(f"{t.group(1)}{t.group(2)}///< \\verbatim {t.group(3)} \\endverbatim")
            else:
                out.append(lines[i])
            first_block = first_block and lines[i].strip() == ""
            i += 1
            continue
        j = i
        texts = []
        while j < len(lines) and COMMENT.match(lines[j]):
            texts.append(COMMENT.match(lines[j]).group(2))
            j += 1
        indent = m.group(1)
        following = lines[j].strip() if j < len(lines) else ""
        if first_block:
            out += doc_block(texts, indent, " \\file")  # \file with no name: this file
        elif following and not following.startswith(("#", "}", "public:", "private:", "protected:")):
            out += doc_block(texts, indent)
        else:
            out += lines[i:j]  # a section heading, or a note before an #include: not documentation
        first_block = False
        i = j
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(filter_header(f.read()))
