"""The shape of the package: module sizes and an import graph without cycles.

Read from the source with `ast`, not by importing it, so an import hidden in a function (the
usual way a cycle is papered over) counts as much as one at the top of a module.  Imports under
`if TYPE_CHECKING:` are left out: they never run.  What the engine may import from outside
itself is test_engine_purity.py's; how its rooms, the read side's and those of streams/ may import each other
is here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The repository's folders and the import packages they are (pyproject's package-dir).
PACKAGES = {"streams": "omstream", "schemas": "omstream.schemas",
            "projections": "omstream.projections", "infra": "omstream.infra"}
MAX_LINES = 600


def product_modules() -> dict[str, Path]:
    modules = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


MODULES = product_modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from (n for branch in child.orelse for n in [branch, *_walk(branch)])
            continue
        yield child
        yield from _walk(child)


def imports_of(module: str, path: Path) -> set[str]:
    """Every module `module` imports, as absolute names.  `from package import submodule` imports
    the submodule; the package itself only when a name of its own is imported (a parent package
    is always initialised before its submodules, so that edge alone is no cycle)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):  # a name of the module itself, not only its submodules
                found.add(base)
    return found


GRAPH = {module: {name for name in imports_of(module, path) if name in MODULES and name != module}
         for module, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_product_module_is_over_600_lines():
    sizes = {module: len(path.read_text().splitlines()) for module, path in MODULES.items()}
    print(f"{len(sizes)} modules, the largest: "
          + ", ".join(f"{m} {n}" for m, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:5]))
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_the_import_graph_has_no_cycle():
    # The package root exports names lazily (`omstream.__getattr__`), so it imports nothing.
    assert cycles(GRAPH) == []


def test_a_cycle_would_be_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_unit_tests_mirror_the_package():
    # tests/unit/<x>/ tests the package folder of the same import path (bench/ the benches).
    unit = ROOT / "tests" / "unit"
    package_dirs = {".".join((package, *p.relative_to(ROOT / folder).parts))
                    for folder, package in PACKAGES.items()
                    for p in [ROOT / folder, *(ROOT / folder).rglob("*")] if (p / "__init__.py").is_file()}
    test_dirs = {"omstream." + ".".join(p.relative_to(unit).parts)
                 for p in unit.rglob("*") if p.is_dir() and (p / "__init__.py").is_file()}
    assert test_dirs - package_dirs == {"omstream.bench"}


def test_the_schemas_import_nothing_of_the_rest():
    # The wire contract is what other languages and the read side share: it must not pull in the
    # processor (the engine imports the schemas, never the other way round).
    wrong = {module: sorted(name for name in names if not name.startswith("omstream.schemas"))
             for module, names in GRAPH.items() if module.startswith("omstream.schemas")}
    assert {m: names for m, names in wrong.items() if names} == {}


# --- the engine's rooms ---------------------------------------------------------------------------
ENGINE = "omstream.engine"
#: Which modules each room of the engine holds ("" is its top); its `__init__` maps the same.
ENGINE_ROOMS = {
    "": {"fold", "step", "state", "ids"},
    "cycles": {"activating", "buffering", "check", "deadline", "extracting", "jobs", "multi_observing", "observing",
               "reflecting", "resource_extracting", "results", "status", "thread_deletion",
               "working_memory"},
    "rules": {"activation", "attachments", "extraction", "reflection_plan", "resolution", "resource", "temporal",
              "thresholds", "tokens"},
    "prompting": {"answer_grammar", "groups", "observation_times", "observations", "observer_attachments", "parsing",
                  "prompts", "resource_groups", "sections", "thread_answers", "transcript", "truncation", "window"},
}
#: The floors, bottom up (rooms and top-level modules): a module imports only from its own floor
#: and the floors below it (`omstream.engine.__init__` draws them).
ENGINE_FLOORS = (("state", "ids"), ("rules",), ("prompting",), ("step",), ("cycles",), ("fold",))
MAX_ROOM_MODULES = 15
ROOM_PACKAGES = {f"{ENGINE}.{room}" for room in ENGINE_ROOMS if room}


def engine_rooms(modules: Iterable[str], package: str = ENGINE,
                 room_packages: set[str] = ROOM_PACKAGES) -> dict[str, set[str]]:
    """A package's modules (the engine's unless told) by room ("" for the top), each by the
    rest of its name (a room's subpackage's modules by their path in the room)."""
    rooms: dict[str, set[str]] = {}
    for module in modules:
        if module.startswith(package + ".") and module not in room_packages:
            place, _, rest = module.removeprefix(package + ".").partition(".")
            room, name = (place, rest) if rest else ("", place)
            rooms.setdefault(room, set()).add(name)
    return rooms


def _place(module: str, package: str = ENGINE) -> str:
    """A room, or a top-level module: where `module` sits on the floors."""
    return module.removeprefix(package + ".").split(".")[0]


def against_the_floors(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...],
                       package: str = ENGINE) -> list[str]:
    """Every import inside `package` that climbs a floor, or touches a place on no floor."""
    level = {place: i for i, places in enumerate(floors) for place in places}
    wrong = []
    for module in sorted(graph):
        if not module.startswith(package + "."):
            continue
        for name in sorted(graph[module]):
            if not name.startswith(package + ".") or _place(name, package) == _place(module, package):
                continue
            here, there = level.get(_place(module, package)), level.get(_place(name, package))
            if here is None or there is None or there > here:
                wrong.append(f"{module} -> {name}")
    return wrong


def room_graph(graph: dict[str, set[str]], package: str = ENGINE) -> dict[str, set[str]]:
    """The imports between a package's places (rooms and top-level modules)."""
    places: dict[str, set[str]] = {}
    for module, names in graph.items():
        if module.startswith(package + "."):
            here = _place(module, package)
            places.setdefault(here, set()).update(
                _place(n, package) for n in names if n.startswith(package + ".") and _place(n, package) != here)
    for targets in list(places.values()):
        for target in targets:
            places.setdefault(target, set())
    return places


def test_every_engine_module_is_in_its_room():
    assert engine_rooms(MODULES) == ENGINE_ROOMS
    assert {room: len(names) for room, names in ENGINE_ROOMS.items() if len(names) > MAX_ROOM_MODULES} == {}


def test_the_engine_imports_along_its_floors_and_its_rooms_form_no_cycle():
    assert against_the_floors(GRAPH, ENGINE_FLOORS) == []
    assert cycles(room_graph(GRAPH)) == []


def test_a_module_in_the_wrong_room_or_an_import_against_the_floors_would_be_found():
    e = ENGINE
    graph = {f"{e}.fold": {f"{e}.cycles.check"}, f"{e}.cycles.check": {f"{e}.step", f"{e}.rules.thresholds"},
             f"{e}.step": {f"{e}.rules.thresholds", f"{e}.state"}, f"{e}.rules.thresholds": set(),
             f"{e}.state": set()}
    assert against_the_floors(graph, ENGINE_FLOORS) == []
    assert cycles(room_graph(graph)) == []
    # a rule that reads a prompt, and a step that calls a cycle: both climb
    graph[f"{e}.rules.thresholds"] = {f"{e}.prompting.prompts"}
    graph[f"{e}.step"] = graph[f"{e}.step"] | {f"{e}.cycles.jobs"}
    assert against_the_floors(graph, ENGINE_FLOORS) == [f"{e}.rules.thresholds -> {e}.prompting.prompts",
                                                        f"{e}.step -> {e}.cycles.jobs"]
    assert cycles(room_graph(graph)) == [["cycles", "step"]]
    # a place on no floor (a new room, or a module left at the top) is reported too
    assert against_the_floors({f"{e}.misc.x": {f"{e}.state"}}, ENGINE_FLOORS) == [f"{e}.misc.x -> {e}.state"]
    # a module filed in the wrong room
    moved = [m for m in MODULES if m != f"{e}.rules.thresholds"] + [f"{e}.prompting.thresholds"]
    rooms = engine_rooms(moved)
    assert rooms != ENGINE_ROOMS and "thresholds" in rooms["prompting"] and "thresholds" not in rooms["rules"]


# --- the read side's rooms ------------------------------------------------------------------------
READ = "omstream.projections"
#: Which modules each room of the read side holds ("" is its top); `omstream.projections.__init__`
#: maps the same.  A room's subpackage's modules are named by their path in the room.
READ_ROOMS = {
    "": {"feed", "follower", "openapi", "serve", "versions"},
    "http": {"access", "dashboard", "errors", "query_params", "recall", "sse", "status", "threads", "web"},
    "views": {"activity", "asof", "chat", "context", "dates", "history", "parts", "resource_views",
              "system_messages", "working_memory"},
    "store": {"sqlite", "store", "stored_history", "view_rows"},
    "recall": {"instructions", "messages", "params", "parts", "render", "search_port", "source", "threads", "tool"},
    "search": {"embedding", "embedding.base", "embedding.hashed", "embedding.local", "embedding.remote", "feed",
               "groups", "index", "search", "sqlite_vec", "vectors"},
}
#: The floors, bottom up (rooms and top-level modules), as the package's `__init__` draws them.
READ_FLOORS = (("recall", "follower"), ("views",), ("store",), ("feed", "search"), ("versions",), ("http",),
               ("serve", "openapi"))
MAX_READ_ROOT = 6
READ_ROOM_PACKAGES = {f"{READ}.{room}" for room in READ_ROOMS if room}


def test_every_read_side_module_is_in_its_room():
    assert engine_rooms(MODULES, READ, READ_ROOM_PACKAGES) == READ_ROOMS
    assert len(READ_ROOMS[""]) <= MAX_READ_ROOT
    assert {room: len(names) for room, names in READ_ROOMS.items() if len(names) > MAX_ROOM_MODULES} == {}


def test_the_read_side_imports_along_its_floors_and_its_rooms_form_no_cycle():
    assert against_the_floors(GRAPH, READ_FLOORS, READ) == []
    assert cycles(room_graph(GRAPH, READ)) == []


def test_a_read_side_module_in_the_wrong_room_or_an_import_against_the_floors_would_be_found():
    r = READ
    graph = {f"{r}.serve": {f"{r}.http.web", f"{r}.feed"}, f"{r}.http.web": {f"{r}.versions", f"{r}.views.context"},
             f"{r}.versions": {f"{r}.feed"}, f"{r}.feed": {f"{r}.follower", f"{r}.store.store"},
             f"{r}.store.store": {f"{r}.views.context"}, f"{r}.views.context": {f"{r}.recall.instructions"},
             f"{r}.recall.instructions": set(), f"{r}.follower": set()}
    assert against_the_floors(graph, READ_FLOORS, r) == []
    assert cycles(room_graph(graph, r)) == []
    # the recall tool reading the access check (a room below importing one above): a folder cycle
    # through every room between them
    graph[f"{r}.recall.source"] = {f"{r}.http.access"}
    graph[f"{r}.http.access"] = {f"{r}.views.context"}
    assert against_the_floors(graph, READ_FLOORS, r) == [f"{r}.recall.source -> {r}.http.access"]
    assert cycles(room_graph(graph, r)) == [["feed", "http", "recall", "store", "versions", "views"]]
    # a module left at the top is on no floor
    assert against_the_floors({f"{r}.web": {f"{r}.feed"}}, READ_FLOORS, r) == [f"{r}.web -> {r}.feed"]
    # a module filed in the wrong room, and two more modules on top (seven)
    moved = [m for m in MODULES if m != f"{r}.views.dates"] + [f"{r}.http.dates", f"{r}.util", f"{r}.misc"]
    rooms = engine_rooms(moved, r, READ_ROOM_PACKAGES)
    assert rooms != READ_ROOMS and "dates" in rooms["http"] and "dates" not in rooms["views"]
    assert len(rooms[""]) > MAX_READ_ROOT


# --- the rooms of streams/ ------------------------------------------------------------------------
STREAMS = "omstream"
#: The other folders mapped into the package: they are not rooms of streams/.
OTHER_FOLDERS = tuple(package for package in PACKAGES.values() if package != STREAMS)
#: Which modules the rooms that hold the fold and its edges keep (`__init__` of each maps the same).
STREAMS_ROOMS = {
    "pipeline": {"answering", "cache", "folding", "memories", "sealed_fold", "sending", "signing", "storage"},
    "worker": {"app", "backlog", "capability", "faust_repairs", "fold_loop", "key_agreement", "model_agent", "relay",
               "table"},
    "replay": {"bulk", "bulk_fold", "drop", "replay", "watch"},
    "versions": {"records", "registry", "stats"},
    "client": {"chat_records", "feed_reader", "function_tool", "intake", "om_client", "outgoing", "thread_memory",
               "tools", "working_memory_tool"},
    "conversations": {"export", "files", "simulation"},
    "integrations": {"langgraph", "langgraph_messages", "mcp", "mcp_tools", "openai_agents", "openai_agents_items",
                     "pydantic_ai", "pydantic_ai_messages"},
}
MAX_ROOT_MODULES = 10
#: Places that must not import each other (importer, imported): the worker is Faust, the replay
#: folds in `om replay`'s process, and both stand on the pipeline, which needs neither.
FORBIDDEN = (("worker", "replay"), ("replay", "worker"), ("pipeline", "worker"), ("pipeline", "replay"))


def streams_place(module: str) -> str | None:
    """The folder of streams/ a module is in, or the root module it is; None outside streams/
    (the package itself, the schemas, the read side, infra)."""
    if module == STREAMS or module.startswith(tuple(f"{o}." for o in OTHER_FOLDERS)) or module in OTHER_FOLDERS:
        return None
    return module.removeprefix(STREAMS + ".").split(".")[0]


def streams_rooms(modules: Iterable[str]) -> dict[str, set[str]]:
    """The modules of streams/ by folder ("" for the root), each by its last name; a folder's own
    package (`__init__`) is left out."""
    rooms: dict[str, set[str]] = {}
    folders = {m.split(".")[1] for m in modules if m.count(".") >= 2 and streams_place(m) is not None}
    for module in modules:
        place = streams_place(module)
        if place is None:
            continue
        if place in folders:
            if module != f"{STREAMS}.{place}":
                rooms.setdefault(place, set()).add(module.rpartition(".")[2])
        else:
            rooms.setdefault("", set()).add(place)
    return rooms


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """streams/'s imports between its places: its folders, and the modules at its root."""
    places: dict[str, set[str]] = {}
    for module, names in graph.items():
        here = streams_place(module)
        if here is None:
            continue
        targets = places.setdefault(here, set())
        for name in names:
            there = streams_place(name)
            if there is not None and there != here:
                targets.add(there)
                places.setdefault(there, set())
    return places


def forbidden_arrows(graph: dict[str, set[str]], forbidden: tuple[tuple[str, str], ...]) -> list[str]:
    """Every import from a place to one it must not import."""
    return [f"{module} -> {name}" for module in sorted(graph) for name in sorted(graph[module])
            if (streams_place(module), streams_place(name)) in forbidden]


def test_the_streams_root_is_small_and_every_module_is_in_its_room():
    rooms = streams_rooms(MODULES)
    assert {room: rooms.get(room) for room in STREAMS_ROOMS} == STREAMS_ROOMS
    assert len(rooms[""]) <= MAX_ROOT_MODULES, sorted(rooms[""])


def test_the_folders_of_streams_form_no_cycle_and_the_worker_and_the_replay_stay_apart():
    # A root module counts as a place of its own: an arrow from the ground floor (settings,
    # topics...) back up into a room is a cycle too.
    assert cycles(folder_graph(GRAPH)) == []
    assert forbidden_arrows(GRAPH, FORBIDDEN) == []


def test_a_cycle_between_folders_or_a_forbidden_arrow_would_be_found():
    s = STREAMS
    graph = {f"{s}.worker.app": {f"{s}.pipeline.folding", f"{s}.versions.stats"},
             f"{s}.replay.bulk": {f"{s}.pipeline.folding", f"{s}.versions.stats"},
             f"{s}.pipeline.folding": {f"{s}.settings", f"{s}.schemas.codec"},
             f"{s}.versions.stats": {f"{s}.settings"}, f"{s}.settings": set(), f"{s}.schemas.codec": set()}
    assert folder_graph(graph) == {"worker": {"pipeline", "versions"}, "replay": {"pipeline", "versions"},
                                   "pipeline": {"settings"}, "versions": {"settings"}, "settings": set()}
    assert cycles(folder_graph(graph)) == [] and forbidden_arrows(graph, FORBIDDEN) == []
    # the pipeline reaching up into the worker; the replay borrowing the worker's internals
    graph[f"{s}.pipeline.folding"] = graph[f"{s}.pipeline.folding"] | {f"{s}.worker.app"}
    graph[f"{s}.replay.bulk"] = graph[f"{s}.replay.bulk"] | {f"{s}.worker.table"}
    graph[f"{s}.worker.table"] = set()
    assert cycles(folder_graph(graph)) == [["pipeline", "worker"]]
    assert forbidden_arrows(graph, FORBIDDEN) == [f"{s}.pipeline.folding -> {s}.worker.app",
                                                  f"{s}.replay.bulk -> {s}.worker.table"]
    # a cycle through a module at the root, no arrow between the two folders at all
    loop = {f"{s}.settings": {f"{s}.pipeline.limits"}, f"{s}.pipeline.limits": set(),
            f"{s}.versions.stats": {f"{s}.settings"}, f"{s}.pipeline.folding": {f"{s}.versions.stats"}}
    assert cycles(folder_graph(loop)) == [["pipeline", "settings", "versions"]]
    # a module filed in the wrong room, and a root grown past its bound
    moved = [m for m in MODULES if m != f"{s}.pipeline.signing"] + [f"{s}.worker.signing"]
    rooms = streams_rooms(moved)
    assert "signing" in rooms["worker"] and "signing" not in rooms["pipeline"]
    grown = streams_rooms([*MODULES, *(f"{s}.extra{i}" for i in range(MAX_ROOT_MODULES))])
    assert len(grown[""]) > MAX_ROOT_MODULES
