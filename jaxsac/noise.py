"""Exploration noise of the squashed Gaussian policy: white (SAC's own) or colored.

The policy acts with a = tanh(μ(s) + σ(s)·ε). SAC draws ε white: independent N(0, 1)
at every step. Colored noise (Eberhard et al., "Pink Noise Is All You Need: Colored
Noise Exploration in Deep Reinforcement Learning", ICLR 2023) draws, per env and action
entry, a Gaussian sequence whose power spectrum falls as 1/f^β: β = 0 is white, β = 1
pink, β = 2 red (Brownian-like). Each ε is still N(0, 1) on its own, but consecutive
steps are correlated, so the policy's exploration moves in one direction for a while
(what a sparse goal such as MountainCarContinuous's needs). Only acting uses it: the
losses keep their white reparameterised samples.

    noise = colored_noise(key, beta=1.0, shape=(num_envs, act_dim), horizon=999)  # [..., T]
    eps = acting_noise(root, iteration, beta, (num_envs, act_dim), horizon)       # [E, |A|]

A sequence covers `horizon` iterations (the reference uses the episode length); the
next `horizon` iterations get a new one. The noise of an iteration is a function of the
run's key and the iteration alone (no state), so runs are reproducible and resume
exactly; the price is an inverse FFT of `horizon` points per env and action entry at
each iteration.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NOISE_STREAM = 2
"""The tag of the exploration noise's keys in the run's root key (0 draws the
iterations' keys, 1 the evaluations')."""


def power_law_scales(beta: float, horizon: int) -> tuple[np.ndarray, np.ndarray, float]:
    """For a 1/f^β power spectrum over `horizon` steps (Timmer and König 1995): the
    amplitude of each rFFT frequency [horizon // 2 + 1] (f^(-β/2), the zero frequency
    taking the lowest nonzero one's, 1/horizon), which frequencies have a real
    coefficient only (zero, and an even horizon's Nyquist frequency), and the std of the
    sequence they give."""
    frequencies = np.fft.rfftfreq(horizon)
    frequencies[0] = 1.0 / horizon
    scales = frequencies ** (-beta / 2.0)
    real_only = np.zeros(len(scales), bool)
    real_only[0] = True
    real_only[-1] = horizon % 2 == 0
    # A real coefficient √2·s·a adds 2s²/n² to the variance of each entry of irfft's
    # output; a complex one s·(a + ib) appears with its conjugate and adds 4s²/n².
    variance = np.sum(np.where(real_only, 2.0, 4.0) * scales ** 2) / horizon ** 2
    return scales, real_only, float(np.sqrt(variance))


def colored_noise(key: jax.Array, beta: float, shape: tuple[int, ...], horizon: int
                  ) -> jax.Array:
    """Gaussian sequences [*shape, horizon] float32 of unit variance whose power spectrum
    is proportional to 1/f^β: random complex amplitudes with the spectrum's scales, the
    zero (and an even horizon's Nyquist) frequency real, transformed back to time.
    (The reference's `colorednoise` leaves the zero frequency out of the normalization,
    so its pink noise over 999 steps has variance 1.07; here every entry has variance 1,
    as SAC's white draws do.)"""
    scales, real_only, std = power_law_scales(beta, horizon)
    real, imag = jax.random.normal(key, (2, *shape, len(scales)), jnp.float32)
    # Frequencies with a real coefficient only carry all their power in it.
    real = real * jnp.asarray(np.where(real_only, np.sqrt(2.0), 1.0) * scales, jnp.float32)
    imag = jnp.where(real_only, 0.0, imag * jnp.asarray(scales, jnp.float32))
    return (jnp.fft.irfft(real + 1j * imag, n=horizon, axis=-1) / std).astype(jnp.float32)


def acting_noise(root: jax.Array, iteration: jax.Array, beta: float, shape: tuple[int, ...],
                 horizon: int) -> jax.Array:
    """ε [*shape] of `iteration`: entry `iteration % horizon` of the colored sequences
    drawn for the iterations' chunk `iteration // horizon` from the run's `root` key."""
    chunk_key = jax.random.fold_in(jax.random.fold_in(root, NOISE_STREAM),
                                   iteration // horizon)
    sequences = colored_noise(chunk_key, beta, shape, horizon)
    return jnp.take(sequences, iteration % horizon, axis=-1)
