"""Analyses over HLO modules that answer a question without changing the module.

``batch``: is a module batch-polymorphic, i.e. may one kernel compiled at batch size T run any
batch size by tiling rows through it?
"""

from hlo.analysis.batch import BatchPolymorphism, NotBatchPolymorphic, batch_polymorphism

__all__ = ["BatchPolymorphism", "NotBatchPolymorphic", "batch_polymorphism"]
