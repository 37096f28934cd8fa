#!/usr/bin/python3
"""The kernel-bench tables of kernels/README.md, from the JSON of a recorded device run.

kernel-bench --json writes the file (scripts/device-run bench, on the GPU machine); `scripts/figures.py
record` keeps it in docs/runs/, and `scripts/figures.py update` writes the tables between the markers
<!-- kernel-bench: begin --> and <!-- kernel-bench: end --> (docs/figures/tables.py names the run).
One table per family, rows in the order the bench ran them. The last column compares each row with
its yardstick: GB/s rows with the device's copy bandwidth; TFLOP/s rows with the reference of the same
family and shape (cuBLAS, cuDNN; for conv2d the reference of the same pass), TF32 versions with the
TF32 reference and bf16 versions with the bf16 one where there is one.
"""

def yardstick(row, rows, copy_gbs):
    if row["unit"] == "GB/s":
        return (copy_gbs, "copy") if copy_gbs else (None, None)
    refs = [r for r in rows if r["reference"] and r["family"] == row["family"] and r["shape"] == row["shape"]
            and r["unit"] == row["unit"]]
    if not refs:
        return None, None
    # conv2d's references are per pass ("fwd cuDNN", "bwd-input cuDNN"): a row compares with its own.
    same_pass = [r for r in refs if r["version"].split()[0] == row["version"].split()[0]]
    refs = same_pass or refs
    same_math = [r for r in refs if math(r["version"]) == math(row["version"])]
    refs = same_math or refs
    return refs[0]["value"], refs[0]["version"]


def math(version):
    """A row's arithmetic as its name says: TF32, bf16 or (neither, or 3xTF32: f32 accuracy) f32."""
    v = version.lower()
    return "f32" if "3xtf32" in v else "tf32" if "tf32" in v else "bf16" if "bf16" in v else "f32"


def tables(run, meta):
    """run: kernel-bench's JSON; meta: the recorded run's run.json."""
    rows = run["results"]
    copy = next((r for r in rows if r["family"] == "copy"), None)
    copy_gbs = copy["value"] if copy else None
    out = [f"Measured {run['date']} on {run['device']} with `kernel-bench` (build {run['revision']}), in the"
           f" call `{meta['command']}` recorded in docs/runs/{meta['name']}; `scripts/figures.py update`"
           f" writes these tables."]
    if copy:
        out.append(f"Device-to-device copy: {copy['value']:.0f} GB/s (bytes read + written).")
    families = []
    for r in rows:
        if r["family"] != "copy" and r["family"] not in families:
            families.append(r["family"])
    for family in families:
        out += ["", f"#### {family}", "", "| version | shape | ms | figure | vs yardstick | note |",
                "| --- | --- | ---: | ---: | ---: | --- |"]
        for r in (r for r in rows if r["family"] == family):
            value, name = yardstick(r, rows, copy_gbs)
            ratio = f"{100 * r['value'] / value:.0f}% of {name}" if value and not r["reference"] else ""
            version = f"**{r['version']}**" if r["reference"] else r["version"]
            out.append(f"| {version} | {r['shape']} | {r['ms']:.4f} | {r['value']:.2f} {r['unit']} | {ratio} |"
                       f" {r['note']} |")
    return "\n".join(out)
