"""The episode replay buffer against a brute-force reference over the stored stream.

The reference keeps every step each env ever gave (plain Python lists) and applies
the n-step rules of docs/semantics.md with loops. Sampled items are matched to the
reference by their observation: each observation carries (env, a unique id), so the
tests do not rely on how the buffer lays out its rows (the one layout fact used is the documented
`index = slot * num_envs + env`).
"""

from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jaxsac.replay import episode_buffer
from jaxsac.types import Step

OBS_DIM, ACT_DIM = 3, 2
# Statistical tests use fixed keys (so they are deterministic) and reject at p < 1e-3.
P_VALUE_FLOOR = 1e-3


# --------------------------------------------------------------------------- streams


def make_stream(seed, num_envs, num_adds, max_episode_len, p_truncated, p_failed=0.0):
    """A NEXT_STEP-autoreset stream: a list of `num_adds` Steps with leading axis num_envs.

    Episode lengths are uniform in 1..max_episode_len; an episode ends terminated, truncated
    or (rarely) both. After a done step the env gives the reset row: obs = the final
    observation, a meaningless action, reward 0, no flags, next_obs = the new first obs.
    With probability p_failed a step fails instead, as the gymnasium runner reports it: a
    failed row (obs = next_obs = the last real obs, reward 0, truncated), then a reset row.
    obs = [env, unique id, noise].
    """
    rng = np.random.default_rng(seed)
    counters = [0] * num_envs

    def new_obs(env):
        counters[env] += 1
        return np.array([env, counters[env], rng.normal()], np.float32)

    current = [new_obs(e) for e in range(num_envs)]
    steps_left = [int(rng.integers(1, max_episode_len + 1)) for _ in range(num_envs)]
    pending_reset = [False] * num_envs
    stream = []
    for _ in range(num_adds):
        rows = []
        for env in range(num_envs):
            action = rng.uniform(-1, 1, ACT_DIM).astype(np.float32)
            if pending_reset[env]:
                first = new_obs(env)
                rows.append((current[env], action, 0.0, False, False, first, False))
                current[env], pending_reset[env] = first, False
                steps_left[env] = int(rng.integers(1, max_episode_len + 1))
                continue
            if rng.uniform() < p_failed:
                rows.append((current[env], action, 0.0, False, True, current[env], True))
                pending_reset[env] = True
                continue
            reward = float(np.float32(rng.normal()))
            following = new_obs(env)
            steps_left[env] -= 1
            terminated = truncated = False
            if steps_left[env] == 0:
                kind = rng.uniform()
                truncated = kind < p_truncated
                terminated = not truncated or kind > 0.95
                pending_reset[env] = True
            rows.append((current[env], action, reward, terminated, truncated, following, False))
            current[env] = following
        stream.append(Step(*(np.stack([np.asarray(r[i]) for r in rows]) for i in range(7))))
    stream = [s._replace(reward=s.reward.astype(np.float32)) for s in stream]
    return stream


class Reference:
    """The n-step rules of docs/semantics.md by plain loops over every step each env
    gave."""

    def __init__(self, stream, ring, gamma, n_min, n_max):
        self.num_envs = stream[0].obs.shape[0]
        self.ring, self.gamma, self.n_min, self.n_max = ring, gamma, n_min, n_max
        self.total = len(stream)  # steps per env
        self.rows = [[jax.tree.map(lambda x, e=e: x[e], s) for s in stream]
                     for e in range(self.num_envs)]
        self.by_obs = {(e, int(r.obs[1])): t for e in range(self.num_envs)
                       for t, r in enumerate(self.rows[e])}

    def failed(self, env, t):
        return t < self.total and bool(self.rows[env][t].failed)

    def done(self, env, t):
        """The episode ends at row t: terminated, truncated, or the next row failed (a
        failure ends the episode at its last real step, unless each ring holds one row)."""
        row = self.rows[env][t]
        ended_by_failure = self.ring > 1 and self.failed(env, t + 1)
        return bool(row.terminated) or bool(row.truncated) or ended_by_failure

    def is_valid(self, env, t):
        stored = max(0, self.total - self.ring) <= t < self.total
        return (stored and not self.failed(env, t)
                and (t == 0 or not self.done(env, t - 1)))

    def valid_starts(self):
        return [(e, t) for e in range(self.num_envs) for t in range(self.total)
                if self.is_valid(e, t)]

    def steps_to_end(self, env, t):
        """Steps the walk may take from t: up to the episode's end or the newest step."""
        i = 0
        while not (self.done(env, t + i) or t + i == self.total - 1):
            i += 1
        return i + 1

    def allowed_k(self, env, t):
        end = self.steps_to_end(env, t)
        return sorted({min(n, end) for n in range(self.n_min, self.n_max + 1)})

    def transition(self, env, t, k):
        """(reward, next_obs, discount) of the k-step transition from row t."""
        rows = self.rows[env]
        reward = sum(self.gamma**i * float(rows[t + i].reward) for i in range(k))
        last = rows[t + k - 1]
        discount = 0.0 if bool(last.terminated) else self.gamma**k
        return reward, np.asarray(last.next_obs), discount

    def index(self, env, t):
        return (t % self.ring) * self.num_envs + env

    def locate(self, obs):
        return self.by_obs[(int(obs[0]), int(obs[1]))]


def example_step():
    return Step(np.zeros(OBS_DIM, np.float32), np.zeros(ACT_DIM, np.float32),
                np.float32(0), False, False, np.zeros(OBS_DIM, np.float32))


@functools.cache
def jitted(capacity, num_envs, batch_size, n_step, gamma, prioritized=False, alpha=0.6,
           beta=0.4):
    buf = episode_buffer(capacity, num_envs, batch_size, n_step=n_step, gamma=gamma,
                         prioritized=prioritized, alpha=alpha, beta=beta)
    many = jax.jit(jax.vmap(buf.sample, in_axes=(None, 0)))
    return buf, jax.jit(buf.add), jax.jit(buf.sample), jax.jit(buf.update_priorities), many


def filled(add, buf, stream):
    state = buf.init(example_step())
    for step in stream:
        state = add(state, step)
    return state


def check_batch(ref, batch):
    """Every item equals the reference's transition for its start row and its k."""
    batch = jax.tree.map(np.asarray, batch)
    for b in range(batch.obs.shape[0]):
        env = int(batch.obs[b, 0])
        t = ref.locate(batch.obs[b])
        assert ref.is_valid(env, t), f"sample {b} starts on an invalid row (env {env}, t {t})"
        row = ref.rows[env][t]
        k = int(batch.n_step[b])
        assert k in ref.allowed_k(env, t), (k, ref.allowed_k(env, t))
        reward, next_obs, discount = ref.transition(env, t, k)
        np.testing.assert_array_equal(batch.obs[b], row.obs)
        np.testing.assert_array_equal(batch.action[b], row.action)
        np.testing.assert_allclose(batch.reward[b], reward, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(batch.next_obs[b], next_obs)
        np.testing.assert_allclose(batch.discount[b], discount, rtol=1e-6, atol=0)
        assert batch.indices[b] == ref.index(env, t)


def n_range(n_step):
    return (n_step, n_step) if isinstance(n_step, int) else n_step


# --------------------------------------------------------------------------- n-step content

CONFIGS = [  # (ring, num_envs, n_step, gamma): few, so jit caches are reused
    (5, 1, 1, 0.9),
    (4, 3, 3, 0.8),
    (7, 2, (1, 4), 0.95),
    (1, 2, (1, 2), 0.9),
    (6, 3, (2, 3), 0.7),
]


@settings(max_examples=40, deadline=None)
@given(config=st.sampled_from(CONFIGS), prioritized=st.booleans(),
       seed=st.integers(0, 2**31 - 1), adds=st.integers(1, 24),
       max_episode_len=st.integers(1, 6), p_truncated=st.floats(0.0, 1.0),
       p_failed=st.sampled_from([0.0, 0.0, 0.25]))
def test_samples_match_the_brute_force_reference(config, prioritized, seed, adds,
                                                 max_episode_len, p_truncated, p_failed):
    ring, num_envs, n_step, gamma = config
    buf, add, sample, _, _ = jitted(ring * num_envs, num_envs, 32, n_step, gamma, prioritized)
    stream = make_stream(seed, num_envs, adds, max_episode_len, p_truncated, p_failed)
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, gamma, *n_range(n_step))
    assert bool(buf.can_sample(state)) == bool(ref.valid_starts())
    assert int(state.num_valid) == len(ref.valid_starts())
    if not ref.valid_starts():
        return
    for i in range(2):
        batch = sample(state, jax.random.key(seed % 1000 + i))
        check_batch(ref, batch)
        np.testing.assert_array_equal(batch.weights, 1.0)  # equal priorities: all ones


def test_one_step_is_the_ordinary_transition():
    buf, add, sample, _, _ = jitted(4 * 2, 2, 32, 1, 0.9)
    stream = make_stream(3, 2, 11, 3, 0.5)
    state = filled(add, buf, stream)
    ref = Reference(stream, 4, 0.9, 1, 1)
    batch = jax.tree.map(np.asarray, sample(state, jax.random.key(0)))
    for b in range(32):
        env, t = int(batch.obs[b, 0]), ref.locate(batch.obs[b])
        row = ref.rows[env][t]
        np.testing.assert_array_equal(batch.next_obs[b], row.next_obs)
        assert batch.reward[b] == row.reward
        assert batch.discount[b] == np.float32(0.9 * (1 - bool(row.terminated)))
        assert batch.n_step[b] == 1


def test_worked_example_terminated_versus_truncated():
    """docs/replay.md's example: one env, n = 3, gamma = 0.5, an episode end at t = 2."""
    for terminated in (True, False):
        obs = [np.full(OBS_DIM, v, np.float32) for v in range(10)]
        rewards = [1.0, 2.0, 4.0, 0.0, 8.0]
        done = [False, False, True, False, False]
        # Rows: s0 s1 s2(done, final obs s3) reset(obs s3 -> s4) s4 (next s5).
        obs_of_row = [obs[0], obs[1], obs[2], obs[3], obs[4]]
        next_of_row = [obs[1], obs[2], obs[3], obs[4], obs[5]]
        buf, add, _, _, many = jitted(8, 1, 4, 3, 0.5)
        state = buf.init(example_step())
        for t in range(5):
            state = add(state, Step(obs_of_row[t][None], np.zeros((1, ACT_DIM), np.float32),
                                        np.float32([rewards[t]]),
                                        np.array([done[t] and terminated]),
                                        np.array([done[t] and not terminated]),
                                        next_of_row[t][None]))
        expected = {  # start obs -> (reward, next obs, discount, k)
            0: (1 + 0.5 * 2 + 0.25 * 4, 3, 0.0 if terminated else 0.125, 3),
            1: (2 + 0.5 * 4, 3, 0.0 if terminated else 0.25, 2),
            2: (4.0, 3, 0.0 if terminated else 0.5, 1),
            4: (8.0, 5, 0.5, 1),
        }
        batch = jax.tree.map(np.asarray, many(state, jax.random.split(jax.random.key(1), 64)))
        starts = batch.obs[..., 0]
        assert set(np.unique(starts).tolist()) == set(expected)  # never the reset row (3)
        for start, (reward, next_obs, discount, k) in expected.items():
            hits = starts == start
            np.testing.assert_allclose(batch.reward[hits], reward)
            np.testing.assert_array_equal(batch.next_obs[hits][:, 0], next_obs)
            np.testing.assert_allclose(batch.discount[hits], discount)
            np.testing.assert_array_equal(batch.n_step[hits], k)


# --------------------------------------------------------------------------- uniformity


def sampled_starts(many, state, ref, batches, seed=0):
    keys = jax.random.split(jax.random.key(seed), batches)
    batch = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]),
                         many(state, keys))
    starts = [(int(o[0]), ref.locate(o)) for o in batch.obs]
    return batch, starts


@pytest.mark.parametrize("prioritized", [False, True])
def test_start_rows_are_uniform_over_valid_rows_and_every_k_occurs(prioritized):
    ring, num_envs, n_step, gamma = 20, 3, (1, 4), 0.9
    buf, add, _, _, many = jitted(ring * num_envs, num_envs, 256, n_step, gamma, prioritized)
    stream = make_stream(7, num_envs, 57, 5, 0.5)  # wrapped: 57 steps in a ring of 20
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, gamma, *n_range(n_step))
    valid = ref.valid_starts()
    assert len(valid) < ring * num_envs  # the stream has reset rows
    batch, starts = sampled_starts(many, state, ref, 200)
    assert all(ref.is_valid(*s) for s in starts)

    # Start rows: chi-square against uniform over the valid rows.
    index = {s: i for i, s in enumerate(valid)}
    counts = np.bincount([index[s] for s in starts], minlength=len(valid))
    assert stats.chisquare(counts).pvalue > P_VALUE_FLOOR

    # k: every (start, k) the rules allow occurs, none other; and P(k | start) follows
    # n ~ uniform{n_min..n_max} with k = min(n, steps to the episode end / newest step).
    observed = set(zip(starts, batch.n_step.tolist(), strict=True))
    allowed = {(s, k) for s in valid for k in ref.allowed_k(*s)}
    assert observed == allowed
    expected_k = np.zeros(n_step[1] + 1)
    for s in starts:
        end = ref.steps_to_end(*s)
        for n in range(n_step[0], n_step[1] + 1):
            expected_k[min(n, end)] += 1 / (n_step[1] - n_step[0] + 1)
    observed_k = np.bincount(batch.n_step, minlength=n_step[1] + 1)
    assert stats.chisquare(observed_k[1:], expected_k[1:]).pvalue > P_VALUE_FLOOR
    check_batch(ref, jax.tree.map(lambda x: x[:256], batch))


def test_uniform_sampling_when_most_rows_are_reset_rows():
    """Episodes of one step: every other row is a reset row, so rejection rounds repeat."""
    ring, num_envs = 16, 2
    buf, add, _, _, many = jitted(ring * num_envs, num_envs, 256, 1, 0.9)
    stream = make_stream(1, num_envs, 40, 1, 0.5)
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, 0.9, 1, 1)
    valid = ref.valid_starts()
    assert len(valid) <= ring * num_envs // 2 + num_envs
    _, starts = sampled_starts(many, state, ref, 50)
    index = {s: i for i, s in enumerate(valid)}
    counts = np.bincount([index[s] for s in starts], minlength=len(valid))
    assert stats.chisquare(counts).pvalue > P_VALUE_FLOOR


def test_can_sample():
    buf, add, sample, _, _ = jitted(2, 2, 4, 1, 0.99)  # one slot per env
    state = buf.init(example_step())
    assert not bool(buf.can_sample(state))
    done = Step(np.zeros((2, OBS_DIM), np.float32), np.zeros((2, ACT_DIM), np.float32),
                np.zeros(2, np.float32), np.array([True, True]), np.array([False, False]),
                np.ones((2, OBS_DIM), np.float32))
    state = add(state, done)
    assert bool(buf.can_sample(state))  # the first row of each env is valid
    reset = done._replace(terminated=np.array([False, False]))
    state = add(state, reset)
    assert not bool(buf.can_sample(state))  # only reset rows are stored
    batch = sample(state, jax.random.key(0))
    np.testing.assert_array_equal(batch.weights, 0.0)  # documented: weights 0 when empty
    state = add(state, reset)
    assert bool(buf.can_sample(state))


# --------------------------------------------------------------------------- prioritized


def priority_stream():
    ring, num_envs = 16, 2
    stream = make_stream(11, num_envs, 37, 6, 0.5)
    return ring, num_envs, stream


def test_prioritized_frequencies_and_weights_follow_the_priorities():
    ring, num_envs, stream = priority_stream()
    alpha, beta, eps = 0.7, 0.6, 1e-6
    buf, add, _, update, many = jitted(ring * num_envs, num_envs, 256, (1, 3), 0.9, True,
                                       alpha, beta)
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, 0.9, 1, 3)
    valid = ref.valid_starts()
    rng = np.random.default_rng(0)
    td = rng.exponential(size=len(valid)).astype(np.float32)
    td[0] = 0.0  # a zero td error still gets priority eps
    indices = np.array([ref.index(*s) for s in valid], np.int32)
    state = update(state, indices, td)

    priority = (np.abs(td.astype(np.float64)) + eps) ** alpha
    probability = priority / priority.sum()
    batch, starts = sampled_starts(many, state, ref, 400, seed=1)
    index = {s: i for i, s in enumerate(valid)}
    sampled = np.array([index[s] for s in starts])
    counts = np.bincount(sampled, minlength=len(valid))
    big = probability * len(sampled) >= 5  # chi-square needs expected counts >= 5
    expected = np.append(probability[big], probability[~big].sum()) * len(sampled)
    observed = np.append(counts[big], counts[~big].sum())
    assert stats.chisquare(observed, expected).pvalue > P_VALUE_FLOOR

    # IS weights: w = (N P(t))^-beta / max_j (N P(j))^-beta, so w_i / w_j = (P_i/P_j)^-beta.
    n_valid = len(valid)
    expected_weights = (n_valid * probability[sampled]) ** -beta \
        / np.max((n_valid * probability) ** -beta)
    np.testing.assert_allclose(batch.weights, expected_weights, rtol=2e-5)
    assert batch.weights.max() <= 1.0
    check_batch(ref, jax.tree.map(lambda x: x[:256], batch))

    # A new step gets p_max^alpha, p_max = max(1, |td| + eps) so far.
    p_max = max(1.0, float(np.abs(td).max()) + eps)
    np.testing.assert_allclose(float(state.max_priority), p_max, rtol=1e-6)
    next_step = make_stream(11, num_envs, 38, 6, 0.5)[-1]
    state = add(state, next_step)
    new_rows = [(37 % ring) * num_envs + env for env in range(num_envs)]
    leaves = np.asarray(state.priority_sums[0]).reshape(-1)[new_rows]
    new_is_reset = [bool(ref.done(env, 36)) for env in range(num_envs)]
    np.testing.assert_allclose(leaves, np.where(new_is_reset, 0.0, p_max**alpha), rtol=1e-6)


def test_updated_priorities_change_sampling_as_expected():
    ring, num_envs, stream = priority_stream()
    buf, add, _, update, many = jitted(ring * num_envs, num_envs, 256, (1, 3), 0.9, True,
                                       1.0, 0.4)
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, 0.9, 1, 3)
    valid = ref.valid_starts()
    indices = np.array([ref.index(*s) for s in valid], np.int32)
    # All priorities 1 except one row at 30: that row is drawn 30 / (N - 1 + 30) of the time.
    td = np.full(len(valid), 1.0 - 1e-6, np.float32)
    td[5] = 30.0 - 1e-6
    state = update(state, indices, td)
    _, starts = sampled_starts(many, state, ref, 40, seed=2)
    share = np.mean([s == valid[5] for s in starts])
    expected = 30 / (len(valid) - 1 + 30)
    sigma = math.sqrt(expected * (1 - expected) / len(starts))
    assert abs(share - expected) < 5 * sigma
    # Lower it again: back to uniform over valid rows.
    td[5] = 1.0 - 1e-6
    state = update(state, indices[5:6], td[5:6])
    _, starts = sampled_starts(many, state, ref, 40, seed=3)
    share = np.mean([s == valid[5] for s in starts])
    expected = 1 / len(valid)
    sigma = math.sqrt(expected * (1 - expected) / len(starts))
    assert abs(share - expected) < 5 * sigma


def test_repeated_indices_take_the_largest_value_and_invalid_rows_are_ignored():
    ring, num_envs, stream = priority_stream()
    buf, add, _, update, _ = jitted(ring * num_envs, num_envs, 256, (1, 3), 0.9, True)
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, 0.9, 1, 3)
    valid = [ref.index(*s) for s in ref.valid_starts()]
    reset = [i for i in range(ring * num_envs) if i not in valid]
    assert reset
    repeated = update(state, np.array([valid[0], valid[1], valid[0], valid[0], reset[0]],
                                      np.int32),
                      np.array([5.0, 2.0, 7.0, 3.0, 9.0], np.float32))
    single = update(update(state, np.array([valid[1]], np.int32), np.array([2.0], np.float32)),
                    np.array([valid[0]], np.int32), np.array([7.0], np.float32))
    for a, b in zip(repeated.priority_sums + repeated.priority_mins,
                    single.priority_sums + single.priority_mins, strict=True):
        np.testing.assert_array_equal(a, b)
    # p_max counts every valid occurrence (7), not the reset row's 9.
    np.testing.assert_allclose(float(repeated.max_priority), 7.0 + 1e-6)
    leaves = np.asarray(repeated.priority_sums[0]).reshape(-1)
    assert leaves[reset[0]] == 0.0


ADVERSARIAL_TD = [np.nan, np.inf, -np.inf, 0.0, 1e30, -3.0, 0.5, 7.0, 1e-12, 2.0]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), calls=st.integers(1, 6),
       alpha=st.sampled_from([0.0, 0.6, 1.0]), data=st.data())
def test_adversarial_priority_updates_keep_the_trees_exact_and_samples_valid(
        seed, calls, alpha, data):
    ring, num_envs, n_step, gamma = 6, 3, (1, 2), 0.9
    capacity, batch = ring * num_envs, 8
    buf, add, sample, update, _ = jitted(capacity, num_envs, 16, n_step, gamma, True, alpha)
    stream = make_stream(seed, num_envs, 9, 3, 0.5, p_failed=0.2)
    state = filled(add, buf, stream)
    ref = Reference(stream, ring, gamma, *n_step)
    valid = np.zeros(capacity, bool)
    valid[[ref.index(*start) for start in ref.valid_starts()]] = True
    # The brute-force model: p^alpha per row (new rows start at p_max^alpha = 1).
    model = np.where(valid, 1.0, 0.0)
    max_priority = 1.0
    for _ in range(calls):
        indices = np.array(data.draw(st.lists(st.integers(-2 * capacity, 2 * capacity),
                                              min_size=batch, max_size=batch)), np.int32)
        td = np.array(data.draw(st.lists(st.sampled_from(ADVERSARIAL_TD), min_size=batch,
                                         max_size=batch)), np.float32)
        state = update(state, indices, td)
        inside = (indices >= 0) & (indices < capacity)
        ok = inside & valid[np.clip(indices, 0, capacity - 1)] & np.isfinite(td)
        new = {}
        for i, p in zip(indices[ok], np.abs(td[ok]).astype(np.float64) + 1e-6, strict=True):
            new[i] = max(new.get(i, 0.0), min(max(p**alpha, 1e-30), 1e28))
            max_priority = max(max_priority, p)
        for i, value in new.items():
            model[i] = value
        leaves = np.asarray(state.priority_sums[0], np.float64).reshape(-1)[:capacity]
        np.testing.assert_allclose(leaves, model, rtol=1e-5)  # float32 powers
        for lower, upper in zip(state.priority_sums, state.priority_sums[1:], strict=False):
            np.testing.assert_allclose(np.asarray(upper).reshape(-1)[:lower.shape[0]],
                                       np.asarray(lower, np.float64).sum(axis=1), rtol=1e-5)
        assert np.isfinite(float(state.max_priority))
        np.testing.assert_allclose(float(state.max_priority), max_priority, rtol=1e-6)
        drawn = sample(state, jax.random.key(int(indices[0]) % 997))
        assert valid[np.asarray(drawn.indices)].all()
        weights = np.asarray(drawn.weights)
        assert np.all(np.isfinite(weights)) and np.all((weights > 0) & (weights <= 1 + 1e-6))


def test_priority_indices_outside_the_buffer_are_an_error_outside_jit():
    buf = episode_buffer(8, 2, 4, prioritized=True)
    state = filled(jax.jit(buf.add), buf, make_stream(0, 2, 4, 3, 0.5))
    with pytest.raises(ValueError, match=r"update_priorities: indices=\[-5, 8\] are invalid: "
                                         r"must be rows in \[0, 8\)"):
        buf.update_priorities(state, np.array([1, -5, 8, 2], np.int32), np.ones(4, np.float32))


def test_beta_schedule_moves_linearly_then_stays():
    buf = episode_buffer(16, 2, 64, prioritized=True, alpha=1.0, beta=0.2, beta_final=1.0,
                         beta_steps=4)
    stream = make_stream(5, 2, 8, 100, 0.5)
    state = filled(jax.jit(buf.add), buf, stream)
    update, sample = jax.jit(buf.update_priorities), jax.jit(buf.sample)
    indices = np.arange(16, dtype=np.int32)
    td = np.linspace(0.5, 4.0, 16).astype(np.float32)
    for updates, beta in [(1, 0.4), (2, 0.6), (4, 1.0), (6, 1.0)]:
        s = state
        for _ in range(updates):
            s = update(s, indices, td)
        batch = sample(s, jax.random.key(updates))
        leaves = np.asarray(s.priority_sums[0]).reshape(-1)
        p = leaves[np.asarray(batch.indices)]
        expected = (p / leaves[leaves > 0].min()) ** -beta
        np.testing.assert_allclose(batch.weights, expected, rtol=1e-5)


def test_uniform_update_priorities_returns_the_state_unchanged():
    buf = episode_buffer(8, 2, 4)
    state = buf.init(example_step())
    assert buf.update_priorities(state, jnp.zeros(4, jnp.int32), jnp.ones(4)) is state


def test_sums_stay_exact_enough_at_capacity_one_million():
    """10^6 random priority updates (in one lax.scan), then no draw lands on a bad row."""
    capacity, num_envs, batch = 10**6, 1000, 256
    buf = episode_buffer(capacity, num_envs, 4096, n_step=(1, 3), prioritized=True, alpha=0.6)
    example = Step(jnp.zeros(1), jnp.zeros(1), jnp.float32(0), False, False, jnp.zeros(1))

    @jax.jit
    def run(key):
        def add(state, key):
            done = jax.random.uniform(key, (num_envs,)) < 0.2  # ~17% reset rows
            step = Step(jnp.zeros((num_envs, 1)), jnp.zeros((num_envs, 1)),
                        jnp.zeros(num_envs), done, jnp.zeros(num_envs, bool),
                        jnp.zeros((num_envs, 1)))
            return buf.add(state, step), None

        def update(state, key):
            index_key, td_key = jax.random.split(key)
            indices = jax.random.randint(index_key, (batch,), 0, capacity)
            # |td| over 9 orders of magnitude, so leaves differ wildly in size.
            td_error = 10.0 ** jax.random.uniform(td_key, (batch,), minval=-6, maxval=3)
            return buf.update_priorities(state, indices, td_error), None

        add_key, update_key = jax.random.split(key)
        state = jax.lax.scan(add, buf.init(example),
                             jax.random.split(add_key, capacity // num_envs))[0]
        state = jax.lax.scan(update, state,
                             jax.random.split(update_key, -(-10**6 // batch)))[0]
        return state

    state = run(jax.random.key(0))
    leaves = np.asarray(state.priority_sums[0]).reshape(-1)[:capacity]
    reset = (np.asarray(state.flags) & 4) != 0
    assert 0.1 < reset.mean() < 0.3
    assert np.all(leaves[reset] == 0) and np.all(leaves[~reset] > 0)
    assert int(state.num_valid) == int((~reset).sum())
    # Every node is its children's sum, so the root is the leaves' total to float32 rounding.
    for lower, upper in zip(state.priority_sums[:-1], state.priority_sums[1:], strict=False):
        child_sums = np.asarray(lower, np.float64).sum(axis=1)
        np.testing.assert_allclose(np.asarray(upper).reshape(-1)[:len(child_sums)],
                                   child_sums, rtol=1e-5)
    root = float(np.asarray(state.priority_sums[-1], np.float64).sum())
    np.testing.assert_allclose(root, leaves.astype(np.float64).sum(), rtol=1e-5)

    sample = jax.jit(jax.vmap(buf.sample, in_axes=(None, 0)))
    indices = np.asarray(sample(state, jax.random.split(jax.random.key(1), 25)).indices)
    assert indices.min() >= 0 and indices.max() < capacity
    assert not reset[indices].any()
    assert np.all(leaves[indices] > 0)


# --------------------------------------------------------------------------- jit, vmap, donation


@pytest.mark.parametrize("prioritized", [False, True])
def test_vmap_over_a_leading_seed_axis(prioritized):
    seeds, num_envs, ring = 3, 2, 5
    buf = episode_buffer(ring * num_envs, num_envs, 16, n_step=(1, 3), gamma=0.9,
                         prioritized=prioritized)
    streams = [make_stream(s, num_envs, 13, 4, 0.5) for s in range(seeds)]
    examples = jax.tree.map(lambda *x: np.stack(x), *[example_step()] * seeds)
    states = jax.vmap(buf.init)(examples)
    add = jax.jit(jax.vmap(buf.add))
    for t in range(13):
        states = add(states, jax.tree.map(lambda *x: np.stack(x), *[s[t] for s in streams]))
    keys = jax.random.split(jax.random.key(0), seeds)
    batches = jax.jit(jax.vmap(buf.sample))(states, keys)
    add_one, sample_one = jax.jit(buf.add), jax.jit(buf.sample)
    for s in range(seeds):
        state = filled(add_one, buf, streams[s])
        one = sample_one(state, keys[s])
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(batches), strict=True):
            np.testing.assert_array_equal(a, b[s])
        check_batch(Reference(streams[s], ring, 0.9, 1, 3), one)


def test_traced_gamma_matches_python_gamma():
    buf_py, add, sample, _, _ = jitted(4 * 3, 3, 32, 3, 0.8)
    stream = make_stream(2, 3, 10, 4, 0.5)
    state = filled(add, buf_py, stream)
    key = jax.random.key(5)

    @jax.jit
    @jax.vmap
    def sample_with(gamma):
        return episode_buffer(12, 3, 32, n_step=3, gamma=gamma).sample(state, key)

    batches = sample_with(jnp.array([0.8, 0.5]))
    expected = sample(state, key)
    np.testing.assert_allclose(batches.reward[0], expected.reward, rtol=1e-6)
    np.testing.assert_allclose(batches.discount[0], expected.discount, rtol=1e-6)
    check_batch(Reference(stream, 4, 0.5, 3, 3), jax.tree.map(lambda x: x[1], batches))


@pytest.mark.parametrize("prioritized", [False, True])
def test_donated_calls_update_in_place(prioritized):
    """Compiled with the state donated, these programs copy no capacity-sized array:
    add; update_priorities; sample then update_priorities; and lax.scan loops of a
    training step (add, then sample and update, td from the batch) and of back-to-back
    updates and adds."""
    capacity, num_envs, batch_size = 4096, 8, 64
    buf = episode_buffer(capacity, num_envs, batch_size, n_step=(1, 3),
                         prioritized=prioritized)
    state = buf.init(example_step())
    step = make_stream(0, num_envs, 1, 3, 0.5)[0]
    indices, td_error = jnp.arange(batch_size, dtype=jnp.int32), jnp.ones(batch_size)
    key = jax.random.key(0)

    def sample_then_update(state, key, td_error):
        batch = buf.sample(state, key)
        return buf.update_priorities(state, batch.indices, td_error), batch

    def training_step(state, i):
        state = buf.add(state, step)
        for j in range(2):
            batch = buf.sample(state, jax.random.fold_in(key, 2 * i + j))
            state = buf.update_priorities(state, batch.indices, batch.reward * batch.weights)
        return state, batch.reward

    def update_then_add(state, i):
        state = buf.update_priorities(state, indices + i, td_error)
        state = buf.update_priorities(state, 3 * indices + i, td_error)
        return buf.add(state, step), None

    programs = [
        (buf.add, (state, step)),
        (buf.update_priorities, (state, indices, td_error)),
        (sample_then_update, (state, key, td_error)),
        (lambda state: jax.lax.scan(training_step, state, jnp.arange(4)), (state,)),
        (lambda state: jax.lax.scan(update_then_add, state, jnp.arange(4)), (state,)),
    ]
    for fn, args in programs:
        hlo = jax.jit(fn, donate_argnums=0).lower(*args).compile().as_text()
        copies = [line for line in hlo.splitlines()
                  if re.search(r"= \w+\[(4096|256,16)[\],].* copy\(", line)]
        assert not copies, copies
    old = state
    new = jax.jit(buf.add, donate_argnums=0)(state, step)
    assert old.obs.is_deleted()
    assert int(new.filled_slots) == 1


def test_memory_per_step_is_one_observation_not_two():
    obs_dim, act_dim, capacity = 17, 6, 10**4
    buf = episode_buffer(capacity, 8, 256)
    example = Step(np.zeros(obs_dim, np.float32), np.zeros(act_dim, np.float32),
                   np.float32(0), False, False, np.zeros(obs_dim, np.float32))
    state = jax.eval_shape(buf.init, example)
    per_step = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)) / capacity
    one_step = 4 * obs_dim + 4 * act_dim + 4 + 1  # obs, action, reward, one byte of flags
    assert one_step <= per_step < one_step + 1  # + the 8 envs' last next_obs, amortised


# --------------------------------------------------------------------------- dict observations


def as_dict_obs(obs):
    """A dict observation from `make_stream`'s obs [..., 3] ([env, unique id, noise]): a
    float32 vector and a uint8 image [2, 2] made from the same numbers."""
    obs = np.asarray(obs)
    image = np.stack([obs[..., 0], obs[..., 1] % 251, obs[..., 1] % 7, obs[..., 0] + 1],
                     axis=-1).reshape(*obs.shape[:-1], 2, 2).astype(np.uint8)
    return {"image": image, "vec": obs.astype(np.float32)}


@pytest.mark.parametrize("prioritized", [False, True])
def test_dict_observations_sample_as_the_brute_force_reference(prioritized):
    """With a dict observation every leaf keeps its dtype in the buffer, and each sampled
    transition's obs and next_obs are the dicts of the reference's rows."""
    ring, num_envs, n_step, gamma = 6, 3, (1, 4), 0.9
    buf = episode_buffer(ring * num_envs, num_envs, 64, n_step=n_step, gamma=gamma,
                         prioritized=prioritized)
    add, sample = jax.jit(buf.add), jax.jit(buf.sample)
    for seed in range(3):
        stream = make_stream(seed, num_envs, 15, 4, 0.5, 0.2)
        state = buf.init(example_step()._replace(obs=as_dict_obs(np.zeros(OBS_DIM)),
                                                 next_obs=as_dict_obs(np.zeros(OBS_DIM))))
        for step in stream:
            state = add(state, step._replace(obs=as_dict_obs(step.obs),
                                             next_obs=as_dict_obs(step.next_obs)))
        assert state.obs["image"].dtype == np.uint8 and state.obs["vec"].dtype == np.float32
        assert state.last_next_obs["image"].shape == (num_envs, 2, 2)
        ref = Reference(stream, ring, gamma, *n_range(n_step))
        assert int(state.num_valid) == len(ref.valid_starts())
        batch = jax.tree.map(np.asarray, sample(state, jax.random.key(seed)))
        for b in range(64):
            env, t = int(batch.obs["vec"][b, 0]), ref.locate(batch.obs["vec"][b])
            assert ref.is_valid(env, t)
            k = int(batch.n_step[b])
            assert k in ref.allowed_k(env, t)
            reward, next_obs, discount = ref.transition(env, t, k)
            for name, leaf in as_dict_obs(ref.rows[env][t].obs).items():
                np.testing.assert_array_equal(batch.obs[name][b], leaf)
            for name, leaf in as_dict_obs(next_obs).items():
                np.testing.assert_array_equal(batch.next_obs[name][b], leaf)
            np.testing.assert_allclose(batch.reward[b], reward, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(batch.discount[b], discount, rtol=1e-6, atol=0)
            assert batch.indices[b] == ref.index(env, t)


def test_a_dict_step_of_another_shape_is_named():
    buf = episode_buffer(16, 2, 4)
    state = buf.init(example_step()._replace(obs=as_dict_obs(np.zeros(OBS_DIM)),
                                             next_obs=as_dict_obs(np.zeros(OBS_DIM))))
    good = make_stream(0, 2, 1, 3, 0.5)[0]
    good = good._replace(obs=as_dict_obs(good.obs), next_obs=as_dict_obs(good.next_obs))
    bad = good._replace(obs={**good.obs, "image": np.zeros((2, 3, 2), np.uint8)})
    with pytest.raises(ValueError, match=r"step\.obs has shape \{'image': \(2, 3, 2\), "
                       r"'vec': \(2, 3\)\}; expected \{'image': \(2, 2, 2\), 'vec': \(2, 3\)\}"):
        buf.add(state, bad)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, name", [
    (dict(capacity=4, num_envs=8), "capacity"),
    (dict(capacity=10, num_envs=4), "capacity"),
    (dict(capacity=0, num_envs=1), "capacity"),
    (dict(num_envs=0), "num_envs"),
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=2.5), "batch_size"),
    (dict(n_step=0), "n_step"),
    (dict(n_step=(3, 2)), "n_step"),
    (dict(n_step=(0, 2)), "n_step"),
    (dict(n_step=(1, 2, 3)), "n_step"),
    (dict(n_step=1.5), "n_step"),
    (dict(gamma=1.5), "gamma"),
    (dict(gamma=-0.1), "gamma"),
    (dict(alpha=-0.1), "alpha"),
    (dict(beta=1.5), "beta"),
    (dict(beta=-0.5), "beta"),
    (dict(eps=0.0), "eps"),
    (dict(beta_final=2.0), "beta_final"),
    (dict(beta_steps=-1), "beta_steps"),
    (dict(prioritized="yes"), "prioritized"),
])
def test_bad_factory_arguments_raise_naming_them(kwargs, name):
    args = dict(capacity=16, num_envs=2, batch_size=4) | kwargs
    with pytest.raises(ValueError, match=rf"{name}=.*must be"):
        episode_buffer(**args)


def test_bad_steps_raise_naming_the_field():
    buf = episode_buffer(16, 2, 4)
    state = buf.init(example_step())
    good = make_stream(0, 2, 1, 3, 0.5)[0]
    bad_steps = {
        "obs": good._replace(obs=np.zeros((3, OBS_DIM), np.float32)),  # leading axis 3
        "action": good._replace(action=np.zeros((2, ACT_DIM + 1), np.float32)),
        "reward": good._replace(reward=np.zeros((2, 1), np.float32)),
        "next_obs": good._replace(next_obs=np.zeros((2, OBS_DIM + 1), np.float32)),
        "terminated": good._replace(terminated=np.zeros(3, bool)),
    }
    for name, step in bad_steps.items():
        with pytest.raises(ValueError, match=rf"step\.{name} has shape"):
            buf.add(state, step)
        with pytest.raises(ValueError, match=rf"step\.{name} has shape"):
            jax.jit(buf.add)(state, step)
    with pytest.raises(ValueError, match=r"example_step\.next_obs"):
        buf.init(example_step()._replace(next_obs=np.zeros(OBS_DIM + 1)))
    with pytest.raises(ValueError, match=r"example_step\.reward"):
        buf.init(example_step()._replace(reward=np.zeros(1)))
    prioritized = episode_buffer(16, 2, 4, prioritized=True)
    with pytest.raises(ValueError, match=r"td_error has shape"):
        prioritized.update_priorities(prioritized.init(example_step()),
                                      jnp.zeros(4, jnp.int32), jnp.zeros(3))
