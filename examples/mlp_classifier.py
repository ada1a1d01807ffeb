"""A classifier written the way autograd's and JAX's users write it: the parameters
are a list of (W, b) tuples, the gradient comes back in the same structure.

The network of HIPS autograd's classic neural-net example (tanh layers, a
log-softmax output through logsumexp, an L2 penalty on the flattened parameters),
trained on a three-arm spiral twice: by plain gradient descent, and by
scipy.optimize.minimize(method="L-BFGS-B") on the parameters raveled into one
vector with s2sgrad.ravel.

    python examples/mlp_classifier.py
"""
import numpy as np

import s2sgrad


def init_params(sizes, rng, scale=0.5):
    """[(W1, b1), (W2, b2), ...] for layer sizes like [2, 32, 32, 3]."""
    return [(scale * rng.standard_normal((m, n)), scale * rng.standard_normal(n))
            for m, n in zip(sizes[:-1], sizes[1:])]


def logsumexp(z):
    top = np.max(z, axis=1, keepdims=True)
    return top + np.log(np.sum(np.exp(z - top), axis=1, keepdims=True))


def predict(params, inputs):
    """Log class probabilities, one row per input."""
    for W, b in params[:-1]:
        inputs = np.tanh(inputs @ W + b)
    W, b = params[-1]
    scores = inputs @ W + b
    return scores - logsumexp(scores)


def l2_norm(params):
    flat = np.concatenate([np.ravel(p) for layer in params for p in layer])
    return flat @ flat


def objective(params, inputs, targets, l2=1e-3):
    """Mean cross-entropy plus the L2 penalty."""
    log_probs = predict(params, inputs)
    return -np.sum(log_probs * targets) / len(inputs) + l2 * l2_norm(params)


def spiral(points_per_class, classes, rng):
    """A three-arm spiral in the plane: inputs (n, 2) and one-hot targets (n, 3)."""
    inputs, labels = [], []
    for k in range(classes):
        radius = np.linspace(0.05, 1.0, points_per_class)
        angle = k * 2 * np.pi / classes + 4.0 * radius + 0.2 * rng.standard_normal(
            points_per_class)
        inputs.append(np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1))
        labels += [k] * points_per_class
    return np.concatenate(inputs), np.eye(classes)[labels]


def accuracy(params, inputs, targets):
    return np.mean(np.argmax(predict(params, inputs), axis=1) == np.argmax(targets, axis=1))


def check_gradient(params, inputs, targets, eps=1e-6):
    """The largest difference between s2sgrad's gradient and central differences."""
    vector, unravel = s2sgrad.ravel(params)
    grad = s2sgrad.ravel(s2sgrad.grad(objective)(params, inputs, targets))[0]
    worst = 0.0
    for i in range(0, vector.size, 37):   # every 37th coordinate: enough to catch a bug
        step = np.zeros_like(vector)
        step[i] = eps
        numeric = (objective(unravel(vector + step), inputs, targets) -
                   objective(unravel(vector - step), inputs, targets)) / (2 * eps)
        worst = max(worst, abs(numeric - grad[i]))
    return worst


def autograd_gradient(params, inputs, targets):
    """The same code differentiated by HIPS autograd (its leaves), if installed:
    the functions above run again with autograd.numpy as their `np`."""
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        return None
    import inspect
    namespace = {"np": anp}
    for fn in (logsumexp, predict, l2_norm, objective):
        exec(inspect.getsource(fn), namespace)
    return s2sgrad.tree_leaves(autograd.grad(namespace["objective"])(params, inputs, targets))


def main() -> None:
    rng = np.random.default_rng(0)
    inputs, targets = spiral(100, 3, rng)
    start = init_params([2, 32, 32, 3], rng)
    grad = s2sgrad.value_and_grad(objective)

    print(f"gradient vs central differences: max difference "
          f"{check_gradient(start, inputs, targets):.1e}")
    reference = autograd_gradient(start, inputs, targets)
    if reference is not None:
        ours = s2sgrad.tree_leaves(grad(start, inputs, targets)[1])
        worst = max(np.max(np.abs(a - b)) for a, b in zip(ours, reference))
        print(f"gradient vs HIPS autograd:      max difference {worst:.1e}")

    print("\nplain gradient descent (step 0.5)")
    params = start
    for step in range(301):
        loss, g = grad(params, inputs, targets)
        if step % 50 == 0:
            print(f"  step {step:3d}  loss {loss:.4f}  accuracy "
                  f"{accuracy(params, inputs, targets):.2f}")
        params = s2sgrad.tree_map(lambda p, dp: p - 0.5 * dp, params, g)

    from scipy.optimize import minimize
    print("\nscipy.optimize.minimize(method='L-BFGS-B') on the raveled parameters")
    x0, unravel = s2sgrad.ravel(start)

    def fun(vector):
        loss, g = grad(unravel(vector), inputs, targets)
        return loss, s2sgrad.ravel(g)[0]

    losses = []
    result = minimize(fun, x0, jac=True, method="L-BFGS-B", options={"maxiter": 200},
                      callback=lambda v: losses.append(fun(v)[0]))
    for k in [0, 9, 49, 99, len(losses) - 1]:
        if k < len(losses):
            print(f"  iteration {k + 1:3d}  loss {losses[k]:.4f}")
    print(f"  accuracy {accuracy(unravel(result.x), inputs, targets):.2f} "
          f"after {result.nit} iterations")


if __name__ == "__main__":
    main()
