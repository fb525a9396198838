"""The shared heatmap labels its axes with the tokens and refuses inputs it cannot draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display needed

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.plotting import plot_attention  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def tick_labels(ax, axis: str) -> list[str]:
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]


def test_square_matrix_uses_keys_for_both_axes() -> None:
    tokens = ["Life", "is", "short"]
    w = torch.softmax(torch.randn(3, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    ax = plot_attention(w, tokens, title="demo")
    assert tick_labels(ax, "x") == tokens
    assert tick_labels(ax, "y") == tokens
    assert ax.get_title() == "demo"
    assert ax.get_xlabel() == "key (attended to)" and ax.get_ylabel() == "query (attending)"
    np.testing.assert_allclose(ax.images[0].get_array(), w.numpy())


def test_rectangular_matrix_with_separate_labels() -> None:
    w = np.full((2, 4), 0.25)
    ax = plot_attention(w, keys=list("abcd"), queries=["x", "y"])
    assert tick_labels(ax, "x") == list("abcd")
    assert tick_labels(ax, "y") == ["x", "y"]


def test_default_labels_are_positions() -> None:
    ax = plot_attention(np.eye(3))
    assert tick_labels(ax, "x") == ["0", "1", "2"]
    assert tick_labels(ax, "y") == ["0", "1", "2"]


def test_special_characters_are_shown_escaped() -> None:
    ax = plot_attention(np.eye(2), ["\n", " "])
    assert tick_labels(ax, "x") == ["\\n", " "]


def test_draws_into_given_axes_and_annotates_small_matrices() -> None:
    fig, axes = plt.subplots(1, 2)
    ax = plot_attention(np.eye(3) * 0.5, ax=axes[1], colorbar=False)
    assert ax is axes[1]
    assert [t.get_text() for t in ax.texts] == [
        "0.50",
        "0.00",
        "0.00",
        "0.00",
        "0.50",
        "0.00",
        "0.00",
        "0.00",
        "0.50",
    ]
    assert len(fig.axes) == 2  # no colour bar was added


def test_large_matrices_are_not_annotated_by_default() -> None:
    ax = plot_attention(np.full((12, 12), 1 / 12))
    assert len(ax.texts) == 0


def test_tensor_with_grad_is_accepted() -> None:
    w = torch.softmax(torch.randn(4, 4, requires_grad=True), dim=-1)
    ax = plot_attention(w)
    np.testing.assert_allclose(ax.images[0].get_array(), w.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 3)])
def test_non_2d_weights_raise(shape: tuple) -> None:
    with pytest.raises(ValueError, match=r"weights must be 2-D \(T_q, T_k\), got shape"):
        plot_attention(np.zeros(shape))


def test_wrong_number_of_key_labels_raises() -> None:
    with pytest.raises(ValueError, match=r"got 3 query labels and 2 key labels for a 3 x 3 matrix"):
        plot_attention(np.eye(3), ["a", "b"], ["a", "b", "c"])


def test_wrong_number_of_query_labels_raises() -> None:
    with pytest.raises(ValueError, match=r"got 1 query labels and 4 key labels for a 2 x 4 matrix"):
        plot_attention(np.zeros((2, 4)), list("abcd"), ["x"])


def test_side_by_side_panels_map_equal_weights_to_equal_colours() -> None:
    # A peaked and a flat matrix: per-panel scaling would draw the flat panel's 0.25 as dark as
    # the peaked panel's 1.0. On the fixed 0-1 scale equal values get equal colours.
    peaked = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    flat = torch.tensor([[0.25, 0.25], [0.25, 0.25]])
    fig, (ax1, ax2) = plt.subplots(1, 2)
    plot_attention(peaked, ax=ax1, colorbar=False)
    plot_attention(flat, ax=ax2, colorbar=False)
    im1, im2 = ax1.images[0], ax2.images[0]
    assert im1.get_clim() == im2.get_clim() == (0.0, 1.0)
    quarter_1 = im1.to_rgba(im1.get_array())[1, 0]
    quarter_2 = im2.to_rgba(im2.get_array())[0, 0]
    np.testing.assert_allclose(quarter_1, quarter_2)
    assert not np.allclose(im2.to_rgba(im2.get_array())[0, 0], im1.to_rgba(im1.get_array())[0, 0])
    plt.close(fig)


def test_vmax_none_scales_to_the_matrix_maximum() -> None:
    scores = torch.tensor([[2.0, 4.0], [1.0, 3.0]])
    ax = plot_attention(scores, vmax=None)
    assert ax.images[0].get_clim() == (0.0, 4.0)
    plt.close(ax.figure)


def test_colorbar_label_is_shown() -> None:
    ax = plot_attention(np.eye(3), vmax=None, colorbar_label="distance")
    assert ax.figure.axes[-1].get_ylabel() == "distance"
    plt.close(ax.figure)


def test_head_and_token_colours_are_far_from_the_role_colours() -> None:
    # A head or a token drawn in a shade of the query, key or value colour would read as one.
    from matplotlib.colors import to_rgb

    from helpers.plotting import HEAD_COLORS, KEY_COLOR, QUERY_COLOR, TOKEN_COLORS, VALUE_COLOR

    roles = [np.array(to_rgb(c)) for c in (QUERY_COLOR, KEY_COLOR, VALUE_COLOR)]
    for palette in (HEAD_COLORS, TOKEN_COLORS):
        assert len(set(palette)) == len(palette) >= 4
        for color in palette:
            nearest = min(np.linalg.norm(np.array(to_rgb(color)) - role) for role in roles)
            assert nearest > 0.35, f"{color} is too close to a query/key/value colour"
