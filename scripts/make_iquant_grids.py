#!/usr/bin/env python3
"""Write src/model/quant/formats/iquant_grids/: the lookup tables of llama.cpp's i-quants (IQ1_S … IQ3_S),
copied from ggml's own ggml-common.h so that hyoka decodes the blocks exactly as ggml does.

ggml-common.h comes from the llama-cpp-python sdist on PyPI (it vendors llama.cpp): pass the
unpacked sdist's `vendor/llama.cpp` with --llama-cpp, as for make_converter_fixtures.py.
Run: python scripts/make_iquant_grids.py --llama-cpp DIR
"""

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "model" / "quant" / "formats" / "iquant_grids"

# (file, ggml's name, Rust name, Rust element type, what it is)
TABLES = [
    ("iq2_iq3_iq4", "ksigns_iq2xs", "KSIGNS_IQ2XS", "u8",
     "Seven sign bits and their parity as the eighth (IQ2_XXS, IQ2_XS, IQ3_XXS)."),
    ("iq2_iq3_iq4", "iq2xxs_grid", "IQ2XXS_GRID", "u64", "IQ2_XXS: eight magnitudes (bytes) per entry."),
    ("iq2_iq3_iq4", "iq2xs_grid", "IQ2XS_GRID", "u64", "IQ2_XS: eight magnitudes (bytes) per entry."),
    ("iq2_iq3_iq4", "iq2s_grid", "IQ2S_GRID", "u64", "IQ2_S: eight magnitudes (bytes) per entry."),
    ("iq2_iq3_iq4", "iq3xxs_grid", "IQ3XXS_GRID", "u32", "IQ3_XXS: four magnitudes (bytes) per entry."),
    ("iq2_iq3_iq4", "iq3s_grid", "IQ3S_GRID", "u32", "IQ3_S: four magnitudes (bytes) per entry."),
    ("iq1", "iq1s_grid", "IQ1S_GRID", "u64",
     "IQ1_S and IQ1_M: eight values in {-1, 0, 1} (signed bytes) per entry."),
    ("iq2_iq3_iq4", "kvalues_iq4nl", "KVALUES_IQ4NL", "i8", "IQ4_NL and IQ4_XS: the 16 non-linear levels."),
]


def table(source: str, name: str) -> list[str]:
    m = re.search(r"GGML_TABLE_BEGIN\(\s*\w+\s*,\s*" + name + r"\s*,\s*(\w+)\s*\)(.*?)GGML_TABLE_END\(\)",
                  source, re.S)
    if not m:
        raise SystemExit(f"{name} not in ggml-common.h")
    values = [v for v in re.split(r"[\s,]+", m.group(2)) if v]
    size = {"NGRID_IQ1S": 2048}.get(m.group(1)) or int(m.group(1))
    if len(values) != size:
        raise SystemExit(f"{name}: {len(values)} values, declared {size}")
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", type=Path, required=True, help="the sdist's vendor/llama.cpp")
    args = ap.parse_args()
    source = (args.llama_cpp / "ggml" / "src" / "ggml-common.h").read_text()
    per_line = {"u8": 16, "i8": 16, "u32": 8, "u64": 4}
    header = [
        "//! The lookup tables of llama.cpp's i-quants, from ggml's ggml-common.h (llama-cpp-python",
        "//! 0.3.36's vendored llama.cpp). Written by scripts/make_iquant_grids.py; do not edit.",
        "//! A grid entry's bytes, little-endian, are the values of consecutive weights.",
        "",
    ]
    files: dict[str, list[str]] = {}
    for file, ggml_name, name, ty, doc in TABLES:
        out = files.setdefault(file, list(header))
        values = table(source, ggml_name)
        out.append(f"/// {doc} ggml's `{ggml_name}`.")
        out.append("#[rustfmt::skip]")
        out.append(f"pub const {name}: [{ty}; {len(values)}] = [")
        for i in range(0, len(values), per_line[ty]):
            out.append("    " + ", ".join(values[i:i + per_line[ty]]) + ",")
        out.append("];")
        out.append("")
    OUT.mkdir(exist_ok=True)
    for file, out in files.items():
        (OUT / f"{file}.rs").write_text("\n".join(out))
    index = list(header)
    index += [f"mod {file};" for file in files] + [""]
    for file in files:
        names = ", ".join(sorted(n for f, _, n, _, _ in TABLES if f == file))
        index.append(f"pub use {file}::{{{names}}};" if "," in names else f"pub use {file}::{names};")
    (OUT / "mod.rs").write_text("\n".join(index) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
