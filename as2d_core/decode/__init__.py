"""Decoding one request: the target loop, the proposers, the drafter's producer thread, the result.

``run_request`` is the entry point; ``target_loop`` is the one loop every method shares.
"""
from as2d_core.decode.loop import Counters, OnCommit, Proposer, TargetOnly, greedy_reference, target_loop, verify_and_commit
from as2d_core.decode.producer import Producer, stop_and_join
from as2d_core.decode.proposers import PublishedProposer
from as2d_core.decode.methods import Method, UnknownMethod, get_method, method_names
from as2d_core.decode.request import run_request
from as2d_core.decode.result import DecodeResult, build_result

__all__ = ["Counters", "DecodeResult", "Method", "OnCommit", "Producer", "Proposer", "PublishedProposer", "TargetOnly",
           "UnknownMethod", "build_result", "get_method", "greedy_reference", "method_names", "run_request",
           "stop_and_join", "target_loop", "verify_and_commit"]
