"""A recurrent network written the way HIPS autograd's examples are written, and
differentiated as it stands:

- the loss is made by a factory (`make_loss`) and closes over the data;
- the cell is a `def` nested in the loss, reading the loss's parameters;
- the parameters are a list of `(W, b)` pairs;
- the nonlinearity is a function passed to a helper (`layer(..., np.tanh)`);
- the sequence is walked by a generator function (`hidden_states`);
- a penalty is a `functools.partial` made inside the loss;
- training is `scipy.optimize.minimize(method="L-BFGS-B")` on the parameters
  raveled into one vector (`s2sgrad.ravel`).

The task: predict the next value of a noisy sine wave from the last hidden state.
The gradient is checked against central differences before training.

    python examples/rnn_autograd_style.py
"""
import functools

import numpy as np

import s2sgrad


def init_params(hidden, rng, scale=0.3):
    """[(W_in, b_in), (W_rec, b_rec), (W_out, b_out)]."""
    return [(scale * rng.standard_normal((1, hidden)), np.zeros(hidden)),
            (scale * rng.standard_normal((hidden, hidden)), np.zeros(hidden)),
            (scale * rng.standard_normal((hidden, 1)), np.zeros(1))]


def layer(W, b, x, nonlinearity):
    return nonlinearity(x @ W + b)


def hidden_states(params, inputs):
    """The hidden state after each step (a generator, as one would write it)."""
    (W_in, b_in), (W_rec, b_rec), _ = params
    h = np.zeros((inputs.shape[0], W_rec.shape[0]))
    for t in range(inputs.shape[1]):
        h = layer(W_rec, b_rec, h, np.tanh) + layer(W_in, b_in, inputs[:, t:t + 1], np.tanh)
        yield h


def penalty(params, weight):
    return weight * sum(np.sum(W ** 2) for W, _ in params)


def make_loss(inputs, targets, weight=1e-3):
    """The training loss for this data: a closure, as autograd's examples make them."""
    def loss(params):
        W_out, b_out = params[-1]

        def readout(h):
            return h @ W_out + b_out

        last = None
        for h in hidden_states(params, inputs):
            last = h
        error = readout(last) - targets
        regularise = functools.partial(penalty, weight=weight)
        return np.mean(error ** 2) + regularise(params)
    return loss


def sine_windows(n, length, rng):
    """n windows of a noisy sine wave and the value after each."""
    starts = rng.uniform(0, 2 * np.pi, n)
    steps = starts[:, None] + 0.3 * np.arange(length + 1)[None, :]
    series = np.sin(steps) + 0.05 * rng.standard_normal(steps.shape)
    return series[:, :length], series[:, length:]


def central_differences(loss, params, eps=1e-6):
    flat, unravel = s2sgrad.ravel(params)
    out = np.zeros_like(flat)
    for i in range(flat.size):
        step = np.zeros_like(flat)
        step[i] = eps
        out[i] = (loss(unravel(flat + step)) - loss(unravel(flat - step))) / (2 * eps)
    return out


def main():
    rng = np.random.default_rng(0)
    inputs, targets = sine_windows(64, 8, rng)
    loss = make_loss(inputs, targets)
    params = init_params(6, rng)
    grad = s2sgrad.grad(loss)

    flat_grad, _ = s2sgrad.ravel(grad(params))
    difference = np.max(np.abs(flat_grad - central_differences(loss, params)))
    print(f"gradient against central differences: max difference {difference:.2e}")

    from scipy.optimize import minimize
    flat, unravel = s2sgrad.ravel(params)
    history = []

    def objective(vector):
        value, g = s2sgrad.value_and_grad(loss)(unravel(vector))
        return value, s2sgrad.ravel(g)[0]

    def record(vector):
        history.append(loss(unravel(vector)))
        if len(history) % 10 == 1:
            print(f"iteration {len(history):3d}  loss {history[-1]:.5f}")
    result = minimize(objective, flat, jac=True, method="L-BFGS-B", callback=record,
                      options={"maxiter": 60})
    print(f"loss {loss(params):.5f} -> {result.fun:.5f} after {result.nit} iterations")


if __name__ == "__main__":
    main()
