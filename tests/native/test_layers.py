"""The native folders are layers: each may include only the layers CMakeLists.txt says it builds
on (its herring_layer(... DEPENDS ...) line, followed transitively), so no folder-level include
cycle can come back unnoticed. The front ends (bindings, tensorflow, torch) and the unit tests sit on
top and may include any layer."""

import os
import re

import pytest

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE = os.path.join(ROOT, "native")
FRONT_ENDS = {"bindings", "tensorflow", "torch", "tests"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def declared_layers():
    """layer -> the layers it may include (itself and everything below it), from CMakeLists.txt."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        text = f.read()
    direct = {}
    for args in re.findall(r"^herring_layer\(([^)]*)\)", text, re.M):
        words = args.split()
        name, deps, i = words[0], [], 1
        while i < len(words):
            if words[i] == "DEPENDS":
                i += 1
                while i < len(words) and words[i] not in ("LINKS",):
                    deps.append(words[i])
                    i += 1
            else:
                i += 1
        direct[name] = deps
    allowed = {}

    def below(name, seen=()):
        assert name not in seen, f"CMakeLists.txt: layer cycle through {name}"
        out = {name}
        for dep in direct[name]:
            assert dep in direct, f"CMakeLists.txt: layer {name} depends on undeclared layer {dep}"
            out |= below(dep, seen + (name,))
        return out

    for name in direct:
        allowed[name] = below(name)
    return allowed


def includes(folder):
    """(file, included folder) for every project include in native/<folder> and its rooms (ops/herring/):
    a layer's subfolders are part of it, as CMakeLists.txt builds them into it."""
    out = []
    top = os.path.join(NATIVE, folder)
    for path, _, names in sorted(os.walk(top)):
        for name in sorted(names):
            if name.endswith((".h", ".cc")):
                rel = os.path.relpath(os.path.join(path, name), NATIVE)
                with open(os.path.join(path, name)) as f:
                    out += [(rel, inc) for inc in INCLUDE.findall(f.read())]
    return out


ROOM_INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[a-z_/]+)\.h"', re.M)


def room_includes(folder):
    """(file, included path without .h) for every project include in native/<folder> and below."""
    out = []
    for path, _, names in sorted(os.walk(os.path.join(NATIVE, folder))):
        for name in sorted(n for n in names if n.endswith((".h", ".cc"))):
            with open(os.path.join(path, name)) as f:
                out += [(os.path.relpath(os.path.join(path, name), NATIVE), inc)
                        for inc in ROOM_INCLUDE.findall(f.read())]
    return out


def test_layers_are_declared_bottom_up():
    allowed = declared_layers()
    assert {"common", "kernels", "transport", "rendezvous", "runtime", "ps", "ops", "engine"} <= set(allowed)
    assert "engine" not in allowed["ops"] and "ops" not in allowed["ps"] and "engine" not in allowed["runtime"]


def test_every_native_folder_is_a_layer_or_a_front_end():
    allowed = declared_layers()
    folders = {d for d in os.listdir(NATIVE) if os.path.isdir(os.path.join(NATIVE, d))}
    assert folders - set(allowed) - FRONT_ENDS == set(), "a native folder that CMakeLists.txt does not declare"


def test_each_layer_includes_only_the_layers_below_it():
    allowed = declared_layers()
    layers = set(allowed)
    violations = [f"{src} includes {inc}/" for layer in sorted(layers) for src, inc in includes(layer)
                  if inc in layers and inc not in allowed[layer]]
    assert violations == []


def test_the_herring_room_is_reached_only_through_the_algorithm_list():
    # native/ops/herring/ holds the Herring allreduce and its inner helpers; the other algorithms in
    # ops/ must not build on them (the room builds on ops' shared pieces, not the other way), so ops/
    # stays a list of algorithms. The operation manager picks the Herring allreduce like any other.
    reaching_in = [f"{src} includes {inc}" for src, inc in room_includes("ops")
                   if inc.startswith("ops/herring/") and not src.startswith("ops/herring/")
                   and src not in ("ops/operation_manager.h", "ops/operation_manager.cc")]
    assert reaching_in == []


def test_the_check_sees_a_violation():
    # The rule applied to a made-up include: an algorithm reaching up into the engine.
    allowed = declared_layers()
    assert "engine" not in allowed["ops"]
    assert INCLUDE.findall('#include "engine/engine.h"\n') == ["engine"]
    # and an algorithm of ops/ reaching into the Herring allreduce's room.
    assert ROOM_INCLUDE.findall('#include "ops/herring/small_exchange.h"\n') == ["ops/herring/small_exchange"]
