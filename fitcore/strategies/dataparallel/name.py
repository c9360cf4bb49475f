"""The DataParallel strategy's name, the value of FitConfig.strategy.

In a module of its own, so that the package's modules and the lab's traps name it without importing the
package's `STRATEGY` (which imports them).
"""

NAME = "dataparallel"
