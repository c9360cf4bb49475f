"""The pp strategy's name alone: what its modules import, and the value of FitConfig.strategy."""

NAME = "pp"
