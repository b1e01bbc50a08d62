"""Datasets: offline stand-ins for the papers' data, the real ones through ``datasets`` when online,
and seeded synthetic tasks, each as a list of one small record type with fixed splits.

Public API: :data:`DATASETS`, :func:`load`, :func:`status`, :func:`prepare`, :func:`split_sizes`
and the record types.
"""
from core.data.records import (ImageLabel, MathProblem, MultipleChoice, Passage, TextLabel, TokenTask,
                               canonical_number, record_to_row)
from core.data.registry import (DATASETS, PREPARE_CMD, DatasetSpec, DatasetStatus, get_spec, load, prepare, register,
                                split_sizes, status)

__all__ = ["DATASETS", "PREPARE_CMD", "DatasetSpec", "DatasetStatus", "get_spec", "load", "prepare", "register",
           "split_sizes", "status", "ImageLabel", "MathProblem", "MultipleChoice", "Passage", "TextLabel",
           "TokenTask", "canonical_number", "record_to_row"]
