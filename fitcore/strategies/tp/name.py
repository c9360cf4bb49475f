"""The tp strategy's name alone: what its modules import, and the value of FitConfig.strategy."""

NAME = "tp"
