#!/usr/bin/env python3
"""Write GGUF files that hyoka must read as llama.cpp does, made by llama.cpp itself from the
committed converter fixtures (tests/fixtures/converter, scripts/make_converter_fixtures.py):

- `converter/<model>/split/<type>-0000K-of-0000N.gguf`: a fixture split into shards by
  llama.cpp's `llama-gguf-split` (tools/gguf-split of the llama-cpp-python sdist, compiled here
  against the library llama-cpp-python installed), as Qwen's 7B/14B GGUF repositories ship their
  larger files:
  - `qwen2/split/q4_k_m-…-of-00003`: `--split-max-tensors 10`;
  - `llama3-rope/split/f16-…`: `--split-max-tensors 12 --no-tensor-first-split`, the first
    shard holding metadata only (and `rope_freqs.weight` in a later shard).
  llama.cpp (llama-cpp-python) is checked to give the same logits from the first shard as from
  the whole file before anything is written.
- `converter/qwen2/tq2_0.gguf`: the qwen2 fixture quantized by llama.cpp's quantizer to its
  TQ2_0 mix (ternary TQ2_0 where rows have 256 values, a fallback elsewhere): a type hyoka does
  not read, for the error that names it.

Needs llama-cpp-python 0.3.36 built from source, g++ and the gguf-py of the sdist (as
make_converter_fixtures.py). Run: python scripts/make_split_gguf_fixtures.py [--llama-cpp DIR]
"""

import ctypes
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_converter_fixtures import OUT, SDIST, llama_cpp_from_args  # noqa: E402

SPLITS = [
    # (model, type, llama-gguf-split options)
    ("qwen2", "q4_k_m", ["--split-max-tensors", "10"]),
    ("llama3-rope", "f16", ["--split-max-tensors", "12", "--no-tensor-first-split"]),
]

# What llama-gguf-split compiles from; the sdist's other sources are not needed.
SOURCES = ("tools/gguf-split/", "include/", "ggml/include/", "common/")

# llama-gguf-split's --version reads these from llama.cpp's build-info, which the installed
# library does not carry.
BUILD_INFO = """
int llama_build_number(void) { return 0; }
const char * llama_commit(void) { return "llama-cpp-python-0.3.36"; }
const char * llama_compiler(void) { return "g++"; }
const char * llama_build_target(void) { return "host"; }
"""


def gguf_split_tool(llama_cpp_src: Path, work: Path) -> Path:
    """llama-gguf-split, compiled against the llama.cpp library llama-cpp-python installed."""
    if not (llama_cpp_src / "tools" / "gguf-split").is_dir():
        archive = work / f"{SDIST}.tar.gz"
        prefix = f"{SDIST}/vendor/llama.cpp/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers()
                       if m.name.startswith(prefix) and m.name[len(prefix):].startswith(SOURCES)]
            tar.extractall(work, members=members, filter="data")
    lib = Path(llama_cpp.__file__).parent / "lib"
    stub = work / "gguf_split_build_info.cpp"
    stub.write_text(BUILD_INFO)
    tool = work / "llama-gguf-split"
    subprocess.run(["g++", "-O1", "-std=c++17",
                    "-I", str(llama_cpp_src / "include"), "-I", str(llama_cpp_src / "ggml" / "include"),
                    "-I", str(llama_cpp_src / "common"),
                    str(llama_cpp_src / "tools" / "gguf-split" / "gguf-split.cpp"), str(stub),
                    f"-L{lib}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", str(tool)],
                   check=True)
    return tool


def llama_cpp_logits(gguf: Path) -> np.ndarray:
    model = llama_cpp.Llama(str(gguf), logits_all=True, n_ctx=64, n_threads=2, verbose=False)
    model.eval([1, 5, 9, 17, 3, 40, 2])
    return np.array(model.scores[:7], dtype=np.float32)


def split(tool: Path, model: str, kind: str, options: list[str]) -> None:
    source = OUT / model / f"{kind}.gguf"
    folder = OUT / model / "split"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    subprocess.run([str(tool), *options, str(source), str(folder / kind)], check=True,
                   stdout=subprocess.DEVNULL)
    shards = sorted(folder.glob(f"{kind}-*-of-*.gguf"))
    whole, from_shards = llama_cpp_logits(source), llama_cpp_logits(shards[0])
    if not np.array_equal(whole, from_shards):
        raise SystemExit(f"{model} {kind}: llama.cpp's logits differ between the file and its shards")
    print(f"wrote {len(shards)} shards of {source.relative_to(OUT.parent.parent.parent)}")


def tq2_0(model: str) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_TQ2_0
    params.nthread = 1
    source, target = OUT / model / "f16.gguf", OUT / model / "tq2_0.gguf"
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize failed on {source}")
    from gguf import GGUFReader
    types = {t.tensor_type.name for t in GGUFReader(str(target)).tensors}
    if "TQ2_0" not in types:
        raise SystemExit(f"{target}: types {sorted(types)}, expected TQ2_0 among them")
    print(f"wrote {target.relative_to(OUT.parent.parent.parent)}: {sorted(types)}")


def main() -> None:
    llama_cpp_src, work, env, _ = llama_cpp_from_args()
    sys.path.insert(0, env["PYTHONPATH"])
    tool = gguf_split_tool(llama_cpp_src, work)
    for model, kind, options in SPLITS:
        split(tool, model, kind, options)
    tq2_0("qwen2")


if __name__ == "__main__":
    main()
