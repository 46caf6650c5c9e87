"""Cursor alignment after rejections (Appendix C.3), unit and end to end."""
import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.align import Aligner, Proposal
from tiny_lm import ScriptedSource, TinyLM

MODEL = TinyLM(seed=3)


def test_root_at_expected_position_offers_following_tokens():
    a = Aligner(window=4)
    assert a.propose([5, 6, 7, 8], root=5, limit=2) == Proposal(0, (6, 7))


def test_empty_buffer_offers_nothing():
    a = Aligner()
    assert a.propose([], root=5, limit=4) == Proposal(None, ())
    a.stepped(Proposal(None, ()))
    assert a.expected == 1


def test_deletion_finds_root_further_on():
    # target committed A; drafter has A X B C, target says B after A: X was extra
    a = Aligner(window=4)
    p = a.propose([10, 99, 11, 12, 13], root=10, limit=3)
    a.verified(p, accepted=0)  # rejected 99, target's correction is 11
    p = a.propose([10, 99, 11, 12, 13], root=11, limit=3)
    assert p == Proposal(2, (12, 13))


def test_substitution_is_guessed_after_rejection():
    a = Aligner(window=4)
    p = a.propose([10, 99, 12, 13], root=10, limit=3)
    a.verified(p, accepted=0)  # correction 11 replaces 99
    assert a.propose([10, 99, 12, 13], root=11, limit=3) == Proposal(1, (12, 13), guessed=True)


def test_insertion_is_found_through_the_next_target_token():
    # drafter: A B C D; target: A X B C D (X inserted)
    tokens = [10, 11, 12, 13]
    a = Aligner(window=4)
    p = a.propose(tokens, root=10, limit=3)
    a.verified(p, accepted=0)  # 11 rejected, correction X=50
    p = a.propose(tokens, root=50, limit=3)  # substitution guess: offers 12, 13
    assert p == Proposal(1, (12, 13), guessed=True)
    a.verified(p, accepted=0)  # target's next token after X is 11, not 12
    assert a.propose(tokens, root=11, limit=3) == Proposal(1, (12, 13))


def test_after_two_empty_verifications_only_a_match_is_offered():
    # drafter: A B C D E F G; target: A X Y Z ... (it left the drafter's text)
    tokens = [10, 11, 12, 13, 14, 15, 16]
    a = Aligner(window=4)
    p = a.propose(tokens, root=10, limit=2)
    a.verified(p, accepted=0)  # 11 rejected, correction X=50
    p = a.propose(tokens, root=50, limit=2)
    assert p.guessed
    a.verified(p, accepted=0)  # the guess failed too: two misses
    assert a.propose(tokens, root=51, limit=2) == Proposal(None, ())  # no guess
    a.stepped(Proposal(None, ()))
    assert a.propose(tokens, root=15, limit=2).anchor is None  # nor a single-token match 2 away
    assert a.propose(tokens, root=13, limit=2) == Proposal(3, (14, 15))  # where expected: a match
    a.verified(Proposal(3, (14, 15)), accepted=1)
    assert a.misses == 0


def test_repeated_tokens_take_the_nearest_match():
    a = Aligner(window=6, expected=3)
    assert a.propose([7, 8, 7, 9, 7, 8], root=7, limit=1) == Proposal(4, (8,))


def test_consumed_positions_are_not_reused():
    a = Aligner(window=6)
    p = a.propose([7, 8, 7, 8], root=7, limit=1)
    a.verified(p, accepted=1)  # 8 accepted at index 1; expected = floor = 2
    assert a.propose([7, 8, 7, 8], root=5, limit=3) == Proposal(None, ())


def test_exhausted_record_offers_nothing():
    a = Aligner(window=2, expected=10)
    assert a.propose([1, 2, 3], root=3, limit=4) == Proposal(None, ())


def test_window_bounds_the_search():
    a = Aligner(window=1, after_rejection=False)
    assert a.propose([1, 2, 3, 4], root=4, limit=2) == Proposal(None, ())


def test_the_first_token_may_replace_the_drafts_first():
    # draft: " In 18 13 ." ; the target starts " in": the tokens after the drafter's first are offered
    In, in_, eighteen, thirteen, stop = 1, 2, 3, 4, 5
    a = Aligner(window=8)
    assert a.propose([In, eighteen, thirteen, stop], root=in_, limit=3) == Proposal(0, (eighteen, thirteen, stop),
                                                                                   guessed=True)
    a.stepped(Proposal(None, ()))  # once the target has stepped alone, there is nothing to replace
    assert a.propose([In, eighteen, thirteen, stop], root=7, limit=3) == Proposal(None, ())


@pytest.mark.parametrize("edit", ["insertion", "deletion", "substitution", "repeat", "none"])
def test_edits_keep_output_and_recover(tiny_request, edit):
    request = tiny_request(11)
    ref = run_request(request, MODEL, None, "target-only").tokens
    assert len(ref) > 30
    cut = 12
    draft = {
        "insertion": ref[:cut] + [ref[cut] ^ 7] + ref[cut:],
        "deletion": ref[:cut] + ref[cut + 1 :],
        "substitution": ref[:cut] + [ref[cut] ^ 7] + ref[cut + 1 :],
        "repeat": ref[:cut] + ref[cut - 3 : cut] + ref[cut:],
        "none": list(ref),
    }[edit]
    result = run_request(request, MODEL, ScriptedSource(draft), "as2d", DecodeOptions(budget=6, publication_size=64))
    assert result.tokens == ref
    # after the edit the drafter's suffix is realigned and reused
    assert result.accepted >= len(ref) - cut - 8


def test_a_frequent_token_far_away_does_not_beat_the_substitution():
    # draft: "... 1462 . On the whole , the" ; target: "... 1462 , on the whole , the"
    comma, stop, On, on, the, whole, year = 1, 2, 3, 4, 5, 6, 7
    draft = [year, stop, On, the, whole, comma, the]
    a = Aligner(window=8)
    p = a.propose(draft, root=year, limit=3)
    a.verified(p, accepted=0)  # "." rejected, the target's correction is ","
    p = a.propose(draft, root=comma, limit=3, previous=year)
    assert p.anchor == 1 and p.guessed  # not the later comma at 5


def test_two_token_agreement_finds_a_distant_anchor():
    draft = [10, 11, 12, 13, 14, 15, 16]
    a = Aligner(window=8, expected=1)
    assert a.propose(draft, root=15, limit=2, previous=14) == Proposal(5, (16,))


def test_a_wrong_anchor_does_not_block_the_right_one_behind_it():
    a = Aligner(window=8)
    p = Proposal(anchor=5, candidates=(9, 9))
    a.verified(p, accepted=0)  # the match at 5 led nowhere
    assert a.floor == 0 and a.propose([7, 8, 9, 3, 4, 9, 9], root=8, limit=1, previous=7) == Proposal(1, (9,))
