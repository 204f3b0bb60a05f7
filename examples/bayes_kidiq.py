"""The Python path of ``bayes-recon reconstruct``: attack the embedded kidiq posterior, compare with its data.

    .venv/bin/python examples/bayes_kidiq.py [--points 50] [--seed 0]

Nothing is fitted: the posterior draws are posteriordb's reference draws (embedded in the
package), the model is the registry's NumPyro translation of the Stan program. The attack sees
only the draws; the true data are loaded afterwards, to score the reconstruction.
"""

from __future__ import annotations

import argparse

import bayes_recon as br
from bayes_recon.models import lookup
from bayes_recon.posteriordb import load_posterior

POSTERIOR = "kidiq-kidscore_momiq"  # kid_score ~ Normal(beta[1] + beta[2] * mom_iq, sigma)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=50, help="weighted pseudo-data points M")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    posterior = load_posterior(POSTERIOR)  # the embedded database ($POSTERIOR_DB_PATH if set)
    entry = lookup(POSTERIOR)
    draws = posterior.draws  # Stan names: beta[1], beta[2], sigma (mapped to NumPyro sites)
    print(f"{POSTERIOR}: {len(draws['sigma'])} posterior draws of {sorted(draws)}")

    recon = br.reconstruct(
        entry.model, draws, free=list(entry.free), support=entry.support, n_points=args.points, seed=args.seed
    )
    measure = recon.measure
    print(f"{len(measure)} weighted points in {recon.seconds:.0f} s, objective {recon.objective:.4g}")

    data = entry.model_data(posterior.data)  # only now: the truth, to score the attack
    truth = br.WeightedMeasure.empirical({name: data[name] for name in entry.free})
    print(f"{'':16}{'recovered':>12}{'true':>12}")
    print(f"{'N (total mass)':16}{measure.total_mass():12.1f}{truth.total_mass():12.0f}")
    for name in entry.free:
        print(f"{'mean ' + name:16}{float(measure.mean(name)):12.3f}{float(truth.mean(name)):12.3f}")
        print(f"{'var ' + name:16}{float(measure.var(name)):12.3f}{float(truth.var(name)):12.3f}")
    # The pseudo-points are not the 434 children: any data set with the same N, XᵀX, Xᵀy and yᵀy
    # gives the same posterior. The statistics above are what the posterior reveals.


if __name__ == "__main__":
    main()
