"""Seed example 2 (examples/cube.py): grad of CubeFunction(x).sum(), 3 elements."""
try:
    from benchmarks.workloads._examples import load_example
except ImportError:  # loaded by file path (s2sgrad show)
    from _examples import load_example

example = load_example("cube")

NAME = "seed_cube"
TITLE = "seed: CubeFunction, 3 elements"
FUNCTION = "loss"
WRT = (0,)
LOOPS = False
loss = example.loss
forward = loss


def make_inputs(small=False):
    return (example.X.copy(),)


def hand_grad(x):
    return (3.0 * x * x,)


# --- peers: the cube as each library's custom op, as in the PyTorch original ----

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()
    from autograd.extend import defvjp, primitive

    @primitive
    def cube(x):
        return x ** 3

    defvjp(cube, lambda ans, x: lambda g: 3 * x ** 2 * g)
    g = autograd.grad(lambda x: anp.sum(cube(x)))
    return lambda: (g(*args),)


def _jax_loss(jax, jnp):
    @jax.custom_vjp
    def cube(x):
        return x ** 3

    cube.defvjp(lambda x: (x ** 3, x), lambda x, g: (3 * x ** 2 * g,))
    return lambda x: jnp.sum(cube(x))


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_loss(jax, jnp), argnums=WRT))
    x = jnp.asarray(args[0])
    return lambda: g(x)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_loss(jax, jnp), argnums=WRT)))
    x = jnp.asarray(args[0])
    return lambda: g(x)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()

    class CubeFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return input ** 3

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            return 3 * input ** 2 * grad_output

    x = torch.from_numpy(args[0]).clone().requires_grad_(True)
    return lambda: torch.autograd.grad(CubeFunction.apply(x).sum(), (x,))
