"""Methods that call `self.method(...)`, reached through an instance known when the
code is compiled: `model.loss(w)` of a module-level `model`, `model(w)` (its
`__call__`), `s2sgrad.grad(model.loss)`. Each was refused ("no gradient rule for the
method .predict()": the class of `self`, a parameter, was not known); the callee is
now compiled for that instance, as for a function passed to it, and so is a function
given the instance as an argument. Gradients against
central differences on two shapes (one broadcasting), forward mode too; rebinding a
method, on the class or the instance, compiles again; an attribute's new value is
read, as Python reads it."""
import numpy as np
import pytest
from conftest import check_grad_and_tangent, numeric_grad

import s2sgrad


class Model:
    def __init__(self, scale, target):
        self.scale = scale
        self.target = target

    def predict(self, w, x):
        return np.tanh(x * w) * self.scale

    def residual(self, w, x):
        return self.predict(w, x) - self.target

    def loss(self, w, x):
        return np.mean(self.residual(w, x) ** 2) + self.penalty(w)

    def penalty(self, w):
        return 0.1 * np.sum(w ** 2)

    def __call__(self, w, x):
        return self.loss(w, x)


MODEL = Model(2.0, 0.3)
OTHER = Model(-1.0, 0.0)


def through_the_instance(w, x):
    return MODEL.loss(w, x) + OTHER(w, x)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
@pytest.mark.parametrize("f", [through_the_instance, MODEL.loss, MODEL])
def test_against_differences(f, shapes, rng):
    w, x = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad_and_tangent(f, [w, x], rng)


def test_rebinding_a_method_or_changing_an_attribute_is_seen(rng):
    model = Model(1.5, 0.1)
    g = s2sgrad.grad(model.loss)
    w, x = rng.standard_normal(3), rng.standard_normal(3)
    np.testing.assert_allclose(g(w, x), numeric_grad(model.loss, [w, x], 0), rtol=1e-6,
                               atol=1e-8)
    model.scale = -0.5                                  # data: read when called
    np.testing.assert_allclose(g(w, x), numeric_grad(model.loss, [w, x], 0), rtol=1e-6,
                               atol=1e-8)
    model.penalty = lambda w: np.sum(np.abs(w) ** 3)   # the instance's own method
    np.testing.assert_allclose(g(w, x), numeric_grad(model.loss, [w, x], 0), rtol=1e-6,
                               atol=1e-8)
    del model.penalty
    original = Model.predict
    Model.predict = lambda self, w, x: np.sin(x * w) * self.scale   # the class's
    try:
        np.testing.assert_allclose(g(w, x), numeric_grad(model.loss, [w, x], 0),
                                   rtol=1e-6, atol=1e-8)
    finally:
        Model.predict = original
    np.testing.assert_allclose(g(w, x), numeric_grad(model.loss, [w, x], 0), rtol=1e-6,
                               atol=1e-8)


class Unhashable(Model):
    __hash__ = None


def test_an_instance_a_pair_cannot_be_kept_for_stays_refused(rng):
    model = Unhashable(1.0, 0.0)
    with pytest.raises(s2sgrad.TransformError, match="no gradient rule for the method"):
        s2sgrad.grad(model.loss)(rng.standard_normal(3), rng.standard_normal(3))


def given_as_an_argument(w, x, model):
    return model.loss(w, x) + model(w, x)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_an_instance_passed_as_an_argument(shapes, rng):
    w, x = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    for model in (MODEL, OTHER, Model(0.5, -1.0)):   # (a pair for each)
        want = [numeric_grad(given_as_an_argument, [w, x, model], i) for i in (0, 1)]
        for grads in (s2sgrad.grad(given_as_an_argument, (0, 1))(w, x, model),
                      s2sgrad.grad(given_as_an_argument, (0, 1), jit=True)(w, x, model),
                      s2sgrad.vjp(given_as_an_argument, w, x, model, wrt=(0, 1),
                                  jit=True)[1](1.0)):
            for i in (0, 1):
                np.testing.assert_allclose(grads[i], want[i], rtol=1e-6, atol=1e-8)


DEFAULT = Model(1.0, 0.0)


def with_a_default(w, x, model=DEFAULT):
    return model.loss(w, x)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_an_instance_that_is_a_default(shapes, rng):
    w, x = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad_and_tangent(with_a_default, [w, x], rng)
    want = numeric_grad(with_a_default, [w, x], 0)
    np.testing.assert_allclose(s2sgrad.grad(with_a_default, jit=True)(w, x), want,
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(s2sgrad.vjp(with_a_default, w, x, wrt=0, jit=True)[1](1.0),
                               want, rtol=1e-6, atol=1e-8)


MODELS = [Model(1.0, 0.0)]


def through_an_item(w, x):
    return MODELS[0].loss(w, x)   # (an item of a list: not known when compiling)


def test_an_instance_read_from_a_list_stays_refused(rng):
    with pytest.raises(s2sgrad.TransformError, match="no gradient rule for the method"):
        s2sgrad.grad(through_an_item)(rng.standard_normal(3), rng.standard_normal(3))
