"""Property test: random small programs, compiled gradient vs central differences.

Programs mix assignments, + - * /, np.sin/np.tanh/np.exp, `if` on the sign of
a value, `for` loops with fixed trip counts and `while` loops whose trip count
depends on the data, over a vector input `x` and a scalar input `a`.
"""
import importlib.util
import itertools
import os
import sys
import tempfile

import numpy as np
from conftest import numeric_vjp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import s2sgrad

N_PROGRAMS = int(os.environ.get("S2SGRAD_PROPERTY_EXAMPLES", "220"))
_DIR = tempfile.mkdtemp(prefix="s2sgrad-programs-")
_COUNTER = itertools.count()

UNARY = ["np.sin({})", "np.tanh({})", "np.exp(np.tanh({}))", "np.exp(-{0} * {0} * 0.1)"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / (1.0 + {} * {})"]


@st.composite
def expressions(draw, names, depth=0):
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from(names))
        return repr(draw(st.sampled_from([0.5, -0.3, 1.5, 2.0])))
    if draw(st.booleans()):
        inner = draw(expressions(names, depth + 1))
        return draw(st.sampled_from(UNARY)).format(f"({inner})")
    left = draw(expressions(names, depth + 1))
    right = draw(expressions(names, depth + 1))
    template = draw(st.sampled_from(BINARY))
    if template.count("{}") == 3:
        return "(" + template.format(f"({left})", f"({right})", f"({right})") + ")"
    return "(" + template.format(f"({left})", f"({right})") + ")"


@st.composite
def blocks(draw, names, depth, indent):
    """A block of statements; returns (lines, names defined afterwards)."""
    lines, names = [], list(names)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["assign", "assign", "aug", "if", "for", "while"]
                                    if depth < 2 else ["assign", "aug"]))
        pad = "    " * indent
        if kind == "assign":
            target = draw(st.sampled_from(names + [f"v{len(names)}"]))
            value = draw(expressions(names))
            if value in names:
                # `v = x` would make v another name for x's array, and `v += ...`
                # then writes into the caller's array: refused (not tested) here.
                value += " * 1.0"
            lines.append(f"{pad}{target} = {value}")
            if target not in names:
                names.append(target)
        elif kind == "aug":
            target = draw(st.sampled_from([n for n in names if n not in ("x", "a")] or ["v_"]))
            if target == "v_":
                lines.append(f"{pad}v_ = x * 1.0")
                names.append("v_")
            op = draw(st.sampled_from(["+=", "-=", "*="]))
            rhs = draw(expressions(names))
            lines.append(f"{pad}{target} {op} np.tanh({rhs})")
        elif kind == "if":
            test = draw(st.sampled_from(names))
            threshold = draw(st.sampled_from([0.0137, 0.3091, -0.2113]))
            body, _ = draw(blocks(names, depth + 1, indent + 1))
            orelse, _ = draw(blocks(names, depth + 1, indent + 1))
            lines.append(f"{pad}if np.sum({test}) > {threshold}:")
            lines += body
            if draw(st.booleans()):
                lines.append(f"{pad}else:")
                lines += orelse
        elif kind == "for":
            trips = draw(st.integers(0, 3))
            body, _ = draw(blocks(names, depth + 1, indent + 1))
            lines.append(f"{pad}for i{depth} in range({trips}):")
            lines += body
        else:
            watched = draw(st.sampled_from(names))
            counter = f"n{depth}_{len(lines)}"
            body, _ = draw(blocks(names, depth + 1, indent + 1))
            lines.append(f"{pad}{counter} = 0")
            lines.append(f"{pad}while np.sum({watched} * {watched}) < 4.0 and {counter} < 3:")
            lines += body
            lines.append(f"{pad}    {counter} += 1")
    return lines, names


@st.composite
def programs(draw):
    lines, names = draw(blocks(["x", "a"], 0, 1))
    result = draw(expressions(names))
    body = "\n".join(lines)
    return f"import numpy as np\n\n\ndef f(x, a):\n{body}\n    return np.sum({result})\n"


def _load(source: str):
    name = f"s2s_program_{next(_COUNTER)}"
    path = os.path.join(_DIR, name + ".py")
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.f


# Deterministic in CI; S2SGRAD_PROPERTY_RANDOM=1 explores new programs each run.
@settings(max_examples=N_PROGRAMS, deadline=None,
          derandomize=not os.environ.get("S2SGRAD_PROPERTY_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=programs(), x=st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=2),
       a=st.floats(-1.0, 1.0))
def test_random_programs_match_finite_differences(program, x, a):
    f = _load(program)
    # Off round numbers, so that no input sits exactly on a branch threshold.
    x = np.array(x) * 0.9 + 0.0731
    a = a * 0.9 - 0.0419
    value = f(x.copy(), a)
    assume(np.isfinite(value) and abs(value) < 1e6)
    gx, ga = s2sgrad.grad(f, wrt=(0, 1))(x.copy(), a)
    nx = numeric_vjp(f, [x, a], 1.0, 0)
    na = numeric_vjp(f, [x, a], 1.0, 1)
    scale = max(1.0, float(np.max(np.abs(nx))), abs(na))
    # Within a step of a branch (or loop-exit) threshold, differences are not
    # derivatives: two step sizes disagree there, and the point is skipped.
    nx2 = numeric_vjp(f, [x, a], 1.0, 0, eps=3e-6)
    na2 = numeric_vjp(f, [x, a], 1.0, 1, eps=3e-6)
    assume(np.allclose(nx, nx2, rtol=1e-4, atol=1e-5 * scale) and
           abs(na - na2) <= 1e-4 * abs(na) + 1e-5 * scale)
    assert np.allclose(gx, nx, rtol=1e-5, atol=1e-6 * scale), (program, gx, nx)
    assert abs(ga - na) <= 1e-5 * abs(na) + 1e-6 * scale, (program, ga, na)
