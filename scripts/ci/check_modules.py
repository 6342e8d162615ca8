#!/usr/bin/env python3
"""Check the shape of src/: no import cycles among its files nor among its modules (at every depth:
model, model/quant, model/quant/cpu …), no module that uses one above it in the pipeline's order
(`PIPELINE`; the crate root stands above every module), and no file over the line limit.

The graph has an edge from file A to file B when A names an item that B defines, through a
`use` or a path in code (`crate::…`, `super::…`, `self::…`, or a child module's name). A module
file's `mod` declarations and its `pub use` re-exports of its own descendants are its table of
contents, not uses, and make no edge; a path through a re-export is followed to the file that
defines the item. Run with `--graph` to print every edge.

It first checks itself on small trees (`self_test`). Exit status: 0 when the tree is clean, 1 when
a cycle, a use against the order, a module with no place in it or a long file is found.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

MAX_LINES = 700

# The library's top-level modules in the pipeline's order, lowest first. A module uses only modules
# of lower tiers; modules of one tier are peers and use none of each other (the scorers: a
# translation or likelihood run uses nothing of the judge's), except the shared leaves of tier 0.
# `results` (records, provenance, the resumable runner) is the vocabulary the scorers write in, so
# it stands below them; `error_kind` maps every stage's error to an exit code, so it stands above
# them all; the crate root (lib.rs) stands above everything and no module uses it.
PIPELINE: list[set[str]] = [
    {"version", "checksum", "files", "heap", "rng", "error_text", "definition", "usage_error"},
    {"data"},
    {"rubric"},
    {"prompt"},
    {"model"},
    {"results"},
    {"judge", "likelihood", "bertscore", "translate"},
    {"meta"},
    {"report"},
    {"eval"},
    {"error_kind"},
    {"cli"},
]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ITEM_KINDS = r"(?:struct|enum|fn|trait|type|const|static|union|mod)"


class Module:
    """One file of the tree: its module path, its children, what it defines and re-exports."""

    def __init__(self, path: list[str], file: Path):
        self.path = path
        self.file = file
        self.children: dict[str, Module] = {}
        self.parent: Module | None = None
        self.text = mask(file.read_text())
        self.defined = set(
            re.findall(rf"\b{ITEM_KINDS}\s+({IDENT})", self.text)
            + re.findall(rf"macro_rules!\s*({IDENT})", self.text)
        )
        # name -> absolute path segments of what `pub use` re-exports under that name
        self.reexports: dict[str, list[str]] = {}


def mask(src: str) -> str:
    """The source with comments and the contents of string and char literals blanked (their
    text could look like paths), every offset and line kept."""
    out = list(src)
    n = len(src)

    def blank(start: int, end: int) -> None:
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    i = 0
    while i < n:
        if src.startswith("//", i):
            end = src.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (raw := re.match(r'r(#*)"', src[i:])) and not re.match(r"\w", src[i - 1 : i] or " "):
            hashes = raw.group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            blank(i + 1, end - 1)
            i = end
        elif src[i] == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif src[i] == "'" and (char := re.match(r"'(?:\\.[^']*|[^\\'])'", src[i:])):
            blank(i + 1, i + char.end() - 1)
            i += char.end()
        else:
            i += 1
    return "".join(out)


def inline_depths(masked: str) -> list[int]:
    """Per offset, how many inline `mod x { … }` blocks enclose it."""
    opens = {m.end() - 1 for m in re.finditer(r"\bmod\s+[A-Za-z_]\w*\s*\{", masked)}
    depth = [0] * len(masked)
    inline: list[int] = []  # the brace depth each enclosing inline module opened at
    braces = 0
    for i, c in enumerate(masked):
        if c == "{":
            braces += 1
            if i in opens:
                inline.append(braces)
        elif c == "}":
            if inline and inline[-1] == braces:
                inline.pop()
            braces -= 1
        depth[i] = len(inline)
    return depth


def load_crate(root_file: Path) -> list[Module]:
    modules: list[Module] = []

    def visit(path: list[str], file: Path, parent: Module | None) -> None:
        m = Module(path, file)
        m.parent = parent
        if parent:
            parent.children[path[-1]] = m
        modules.append(m)
        here = file.parent if file.name in ("mod.rs", "lib.rs", "main.rs") else file.with_suffix("")
        declared = rf'(#\[path\s*=\s*"[^"]*"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*;'
        for attr, name in re.findall(declared, file.read_text()):
            if attr:
                target = re.search(r'"([^"]*)"', attr).group(1)
                cands = (file.parent / target,)
            else:
                cands = (here / f"{name}.rs", here / name / "mod.rs")
            for cand in cands:
                if cand.exists():
                    visit(path + [name], cand, m)
                    break

    visit([], root_file, None)
    return modules


def expand_use(tree: str) -> list[tuple[list[str], str | None]]:
    """`a::{b as c, d::{e, self}}` -> [([a,b], c), ([a,d,e], None), ([a,d], None)]."""
    tree = re.sub(r"\s+as\s+", "@", tree)
    tree = re.sub(r"\s+", "", tree)

    def parse(s: str, prefix: list[str]) -> list[tuple[list[str], str | None]]:
        if "{" not in s:
            alias = None
            if "@" in s:
                s, alias = s.split("@", 1)
            segs = [x for x in s.split("::") if x]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            return [(prefix + segs, alias)]
        head, rest = s.split("{", 1)
        body = rest[: rest.rfind("}")]
        parts, depth, cur = [], 0, ""
        for ch in body:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        if cur:
            parts.append(cur)
        base = prefix + [x for x in head.split("::") if x]
        out = []
        for p in parts:
            out.extend(parse(p, base))
        return out

    return parse(tree, [])


def absolute(mod: Module, segs: list[str], inline: int = 0) -> list[str] | None:
    """Module-tree path of `segs` as written in `mod` inside `inline` inline modules, or None
    for another crate's path."""
    if not segs:
        return None
    cur = mod
    while inline and segs and segs[0] == "super":
        segs, inline = segs[1:], inline - 1
    if inline and segs and segs[0] != "crate":
        return None  # names of the inline module itself
    if not segs:
        return None
    first = segs[0]
    if first == "crate":
        return segs[1:]
    if first in ("super", "self"):
        i = 0
        while i < len(segs) and segs[i] in ("super", "self"):
            if segs[i] == "super":
                if cur.parent is None:
                    return None
                cur = cur.parent
            i += 1
        return cur.path + segs[i:]
    if first in mod.children:
        return mod.path + segs
    return None


def definer(abs_path: list[str], root: Module, seen: int = 0) -> Module | None:
    cur = root
    i = 0
    while i < len(abs_path):
        if abs_path[i] in cur.children:
            cur = cur.children[abs_path[i]]
        elif abs_path[i] in cur.reexports and seen < 8:
            target = definer(cur.reexports[abs_path[i]], root, seen + 1)
            if target is None or target.path != cur.reexports[abs_path[i]]:
                break  # an item, not a module
            cur = target
        else:
            break
        i += 1
    if i == len(abs_path) or abs_path[i] == "*":
        return cur
    name = abs_path[i]
    if name in cur.defined:
        return cur
    if name in cur.reexports and seen < 8:
        return definer(cur.reexports[name], root, seen + 1)
    return cur


def edges_of(mod: Module, root: Module) -> set[Path]:
    text = mod.text
    # inline modules (`mod tests { … }`) are the file's own; their `super::` is the file
    depth = inline_depths(text)
    targets: set[Path] = set()
    for u in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        vis, tree = u.group(1), u.group(2)
        for segs, _alias in expand_use(tree):
            ab = absolute(mod, segs, depth[u.start()])
            if ab is None:
                continue
            if vis and mod.path == ab[: len(mod.path)] and len(ab) > len(mod.path):
                continue  # re-export of a descendant: the module's table of contents
            d = definer(ab, root)
            if d is not None:
                targets.add(d.file)
    code = re.sub(r"\b(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", lambda u: " " * len(u.group(0)), text)
    for m in re.finditer(rf"(?<![A-Za-z0-9_:])((?:{IDENT}::)+{IDENT})", code):
        segs = m.group(1).split("::")
        if segs[0] not in ("crate", "super", "self") and segs[0] not in mod.children:
            continue
        ab = absolute(mod, segs, depth[m.start()])
        if ab is None:
            continue
        d = definer(ab, root)
        if d is not None:
            targets.add(d.file)
    targets.discard(mod.file)
    return targets


def fill_reexports(modules: list[Module], root: Module) -> None:
    for mod in modules:
        for tree in re.findall(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", mod.text):
            for segs, alias in expand_use(tree):
                ab = absolute(mod, segs)
                if ab and ab[-1] != "*":
                    mod.reexports[alias or ab[-1]] = ab


def sccs(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on: set[Path] = set()
    out: list[list[Path]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: Path) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def module_of(file: Path, root_dir: Path, depth: int) -> str:
    """The module, `depth` levels below the crate root, that `file` belongs to: its folder path
    (a folder's mod.rs and a file `x.rs` beside folder `x/` are module x)."""
    parts = list(file.relative_to(root_dir).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "/".join(parts[:depth])


def module_cycles(graph: dict[Path, set[Path]], root_dir: Path) -> list[tuple[int, list[str]]]:
    """Cycles among modules, at every depth: the file graph folded onto the modules `depth`
    levels below the root (model, then model/quant, then model/quant/cpu …). Files of one
    module may use each other; two modules may not use each other, directly or through others."""
    out = []
    deepest = max((len(p.relative_to(root_dir).parts) for p in graph), default=1)
    for depth in range(1, deepest + 1):
        folded: dict[str, set[str]] = {}
        for a, targets in graph.items():
            ma = module_of(a, root_dir, depth)
            for b in targets:
                mb = module_of(b, root_dir, depth)
                if ma != mb:
                    folded.setdefault(ma, set()).add(mb)
        for comp in sccs(folded):  # type: ignore[arg-type]
            out.append((depth, [str(c) for c in comp]))
    return out


def order_violations(
    graph: dict[Path, set[Path]], root_dir: Path, order: list[set[str]]
) -> list[str]:
    """Uses of a module above the user in `order`, or of a peer in its tier (tier 0's leaves may
    use each other), uses of the crate root, and top-level modules that have no tier."""
    tier = {m: i for i, group in enumerate(order) for m in group}
    out = []
    unplaced = sorted({module_of(f, root_dir, 1) for f in graph} - set(tier) - {""})
    out += [f"module {m} has no place in the pipeline order (PIPELINE)" for m in unplaced]
    for a, targets in sorted(graph.items()):
        ma = module_of(a, root_dir, 1)
        for b in sorted(targets):
            mb = module_of(b, root_dir, 1)
            if ma == mb or ma not in tier:
                continue
            name_a, name_b = a.relative_to(root_dir.parent), b.relative_to(root_dir.parent)
            if mb == "":
                out.append(f"{name_a} -> {name_b}: the crate root stands above every module")
            elif mb in tier and (tier[mb] > tier[ma] or (tier[mb] == tier[ma] and tier[ma] > 0)):
                where = "a peer of" if tier[mb] == tier[ma] else "above"
                out.append(f"{name_a} -> {name_b}: {mb} stands {where} {ma} in the pipeline")
    return out


def self_test() -> None:
    """The checker on small trees: a cycle through a `use` group, one through a path in code,
    modules that use each other without a file cycle, and the shapes that are not cycles (a table of contents re-exporting its children, a
    child's inline test module, a re-export followed to its definer)."""
    import tempfile

    cases = {
        "use group": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::{b::B, x};\npub struct A;\n",
                       "b.rs": "use crate::a::A;\npub struct B;\n"}, (1, 1)),
        "path in code": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "pub fn f() { crate::b::g() }\n",
                          "b.rs": "pub fn g() { super::a::f() }\n"}, (1, 1)),
        "table of contents": ({"lib.rs": "mod m;\n", "m/mod.rs": "mod a;\nmod b;\npub use a::A;\npub use b::B;\n",
                               "m/a.rs": "pub struct A;\n", "m/b.rs": "use super::A;\npub struct B(A);\n"}, (0, 0)),
        "inline tests": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                          "b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"}, (0, 0)),
        "comment and string": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                                "b.rs": "// crate::a::A\npub const S: &str = \"crate::a::A\";\npub struct B;\n"}, (0, 0)),
        # No file cycle, but the modules x and y use each other (x/a -> y/b, y/c -> x/d).
        "modules": ({"lib.rs": "mod x;\nmod y;\n", "x/mod.rs": "mod a;\nmod d;\n", "y/mod.rs": "mod b;\nmod c;\n",
                     "x/a.rs": "use crate::y::b::B;\npub struct A;\n", "x/d.rs": "pub struct D;\n",
                     "y/b.rs": "pub struct B;\n", "y/c.rs": "use crate::x::d::D;\npub struct C;\n"}, (0, 1)),
    }
    for name, (files, cycles) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                (Path(d) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(d) / rel).write_text(text)
            modules = load_crate(Path(d) / "lib.rs")
            fill_reexports(modules, modules[0])
            graph = {m.file: edges_of(m, modules[0]) for m in modules}
            found = (len(sccs(graph)), len(module_cycles(graph, Path(d))))
            if found != cycles:
                raise SystemExit(
                    f"self-test {name!r}: (file, module) cycles {found} found, {cycles} expected"
                )
    order = [{"leaf"}, {"low"}, {"peer1", "peer2"}, {"high"}]
    order_cases = {
        "down the order": ({"high.rs": "use crate::peer1::P;\n", "peer1.rs": "use crate::low::L;\npub struct P;\n",
                            "low.rs": "use crate::leaf::F;\npub struct L;\n", "leaf.rs": "pub struct F;\n"}, 0),
        "up the order": ({"low.rs": "use crate::high::H;\npub struct L;\n", "high.rs": "pub struct H;\n"}, 1),
        "peers": ({"peer1.rs": "use crate::peer2::Q;\npub struct P;\n", "peer2.rs": "pub struct Q;\n"}, 1),
        "crate root": ({"low.rs": "pub fn f() { crate::R }\n", "leaf.rs": ""}, 1),
        "no place": ({"stray.rs": "pub struct S;\n"}, 1),
    }
    for name, (files, violations) in order_cases.items():
        with tempfile.TemporaryDirectory() as d:
            mods = "".join(f"mod {Path(f).stem};\n" for f in files)
            extra = "pub const R: u8 = 0;\n" if name == "crate root" else ""
            for rel, text in {"lib.rs": mods + extra, **files}.items():
                (Path(d) / rel).write_text(text)
            modules = load_crate(Path(d) / "lib.rs")
            fill_reexports(modules, modules[0])
            graph = {m.file: edges_of(m, modules[0]) for m in modules}
            found = order_violations(graph, Path(d), order)
            if len(found) != violations:
                raise SystemExit(f"self-test {name!r}: {found}, {violations} expected")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--src", default=Path(__file__).resolve().parents[2] / "src", type=Path)
    ap.add_argument("--graph", action="store_true", help="print every edge")
    args = ap.parse_args()
    self_test()
    src: Path = args.src
    bad = 0
    for root_file in (src / "lib.rs", src / "main.rs"):
        modules = load_crate(root_file)
        root = modules[0]
        fill_reexports(modules, root)
        graph = {m.file: edges_of(m, root) for m in modules}
        if args.graph:
            for a in sorted(graph):
                for b in sorted(graph[a]):
                    print(f"{a.relative_to(src.parent)} -> {b.relative_to(src.parent)}")
        for comp in sccs(graph):
            bad += 1
            names = {p: str(p.relative_to(src.parent)) for p in comp}
            print(f"import cycle among {len(comp)} files:")
            for a in comp:
                for b in sorted(graph[a] & set(comp)):
                    print(f"  {names[a]} -> {names[b]}")
        for depth, comp in module_cycles(graph, src):
            bad += 1
            print(f"modules that use each other (depth {depth}): {', '.join(comp)}")
        if root_file.name == "lib.rs":
            for line in order_violations(graph, src, PIPELINE):
                bad += 1
                print(line)
    for f in sorted(src.rglob("*.rs")):
        lines = f.read_text().count("\n")
        if lines > MAX_LINES:
            bad += 1
            print(f"{f.relative_to(src.parent)}: {lines} lines (at most {MAX_LINES})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
