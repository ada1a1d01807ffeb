"""Workload: the negative log-likelihood of a Gaussian mixture, 5,000 points in
2-D, 8 isotropic components, with a logsumexp over the components written out.

Gradient with respect to the means, the log standard deviations and the
mixture logits.
"""
import numpy as np

NAME = "gmm"
TITLE = "Gaussian mixture log-likelihood, logsumexp over 5,000x8"
FUNCTION = "gmm_loss"
WRT = (0, 1, 2)
LOOPS = False


def gmm_loss(means, log_sigmas, logits, X):
    D = X.shape[1]
    diff = X[:, None, :] - means[None, :, :]
    sig2 = np.exp(2.0 * log_sigmas)
    logp = -0.5 * np.sum(diff ** 2, axis=2) / sig2 - D * log_sigmas \
        - 0.5 * D * np.log(2.0 * np.pi)
    top = np.max(logits)
    logw = logits - top - np.log(np.sum(np.exp(logits - top)))
    a = logp + logw
    m = np.max(a, axis=1, keepdims=True)
    ll = m[:, 0] + np.log(np.sum(np.exp(a - m), axis=1))
    return -np.mean(ll)


forward = gmm_loss


def make_inputs(small=False):
    rng = np.random.default_rng(4)
    n, k = (6, 3) if small else (5000, 8)
    centres = rng.standard_normal((k, 2)) * 3.0
    X = centres[rng.integers(0, k, n)] + rng.standard_normal((n, 2))
    means = centres + 0.5 * rng.standard_normal((k, 2))
    log_sigmas = 0.2 * rng.standard_normal(k)
    logits = 0.3 * rng.standard_normal(k)
    return means, log_sigmas, logits, X


def hand_grad(means, log_sigmas, logits, X):
    """Responsibilities times the per-component derivatives."""
    n, D = X.shape
    diff = X[:, None, :] - means[None, :, :]
    sig2 = np.exp(2.0 * log_sigmas)
    q = np.sum(diff ** 2, axis=2)
    w = np.exp(logits - np.max(logits))
    w /= np.sum(w)
    a = -0.5 * q / sig2 - D * log_sigmas + np.log(w)
    r = np.exp(a - np.max(a, axis=1, keepdims=True))
    r /= np.sum(r, axis=1, keepdims=True)          # responsibilities
    a_bar = -r / n
    means_bar = np.einsum("nk,nkd->kd", a_bar / sig2, diff)
    log_sigmas_bar = np.sum(a_bar * q, axis=0) / sig2 - D * np.sum(a_bar, axis=0)
    total = np.sum(a_bar, axis=0)
    logits_bar = total - w * np.sum(total)
    return means_bar, log_sigmas_bar, logits_bar


def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(means, log_sigmas, logits, X):
        D = X.shape[1]
        diff = X[:, None, :] - means[None, :, :]
        logp = -0.5 * anp.sum(diff ** 2, axis=2) / anp.exp(2.0 * log_sigmas) \
            - D * log_sigmas - 0.5 * D * anp.log(2.0 * anp.pi)
        top = anp.max(logits)
        a = logp + logits - top - anp.log(anp.sum(anp.exp(logits - top)))
        m = anp.max(a, axis=1, keepdims=True)
        return -anp.mean(m[:, 0] + anp.log(anp.sum(anp.exp(a - m), axis=1)))
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)
