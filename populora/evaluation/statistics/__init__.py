"""The verdict's statistics: intervals, paired tests, the minimum detectable effect, Holm's families, the cross-fit
weakest/best member, rliable's aggregates, the verdict and a sweep's report, the league's fit, and the known-truth
simulations that check them. Pure functions over arrays; pages and commands only call them.
"""
