"""Decoding one request: the target loop, the proposers, the drafter's producer thread, the result.

``run_request`` is the entry point; ``target_loop`` is the one loop every method shares.
"""
from as2d_core.decode.loop import Counters, OnCommit, Proposer, TargetOnly, greedy_reference, target_loop, verify_and_commit
from as2d_core.decode.producer import Producer, stop_and_join
from as2d_core.decode.proposers import PublishedProposer
from as2d_core.decode.request import METHODS, run_request
from as2d_core.decode.result import DecodeResult, build_result

__all__ = ["METHODS", "Counters", "DecodeResult", "OnCommit", "Producer", "Proposer", "PublishedProposer", "TargetOnly",
           "build_result", "greedy_reference", "run_request", "stop_and_join", "target_loop", "verify_and_commit"]
