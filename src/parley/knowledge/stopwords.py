"""Query stop words: the function words of English and Chinese that a knowledge search
does not look for by words (``lexical.content_terms``).

A question's "how", "does", "the", 什么, 多少 or 的 are in almost every chunk; a
lexical search for them ranks chunks that share nothing with the question but its
grammar, and fusion would then put those next to (or above) the passage found by
meaning. The lists are small and curated: articles, pronouns, auxiliaries and modals,
prepositions, conjunctions, question words, particles; no content words ("long",
"leave", 时间 stay), since a word that is sometimes the point of the question must not
be dropped.

Only queries are filtered: the index keeps every term, so a list changed here needs no
re-indexing. A query made of stop words only keeps them (``lexical.content_terms``).

Chinese is searched by character pairs (``lexical.py``), so a Chinese stop word is
removed from the run before it is cut into pairs: it separates the run, and no pair
straddles it ("婚假有多少个工作日" without 多少 and 个 gives 婚假 假有 | 工作 作日).
Single characters are listed only when they are particles or pronouns that rarely begin
or end a content word (的, 了, 吗, 我, 这, 个...); 有, 到, 过, 地 are not (有效, 到期,
过期, 当地).

What does not belong here: how terms are made (``lexical.py``).
"""

from __future__ import annotations

_ENGLISH = """
    about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could couldn did didn do does doesn
    doing don done down during each either else ever every few for from further had hadn
    has hasn have haven having he her here hers herself him himself his how however if in
    into is isn it its itself just least let may me might more most much must mustn my
    myself neither no nor not now of off on once only onto or other ought our ours
    ourselves out over own per please same shall shan she should shouldn so some such
    than that the their theirs them themselves then there these they this those though
    through thus to too under unless until up upon us very via was wasn we were weren
    what whatever when whenever where wherever whether which while who whoever whom whose
    why will with within without won would wouldn yet you your yours yourself yourselves
    ll ve re many
    """
ENGLISH = frozenset(_ENGLISH.split())
"""English function words (lowercase; one-letter words are never search terms anyway;
"don", "ll", "ve", "re" are what contractions split into)."""

_CHINESE = """
    什么 怎么 怎样 怎么样 如何 为什么 为何 多少 多久 多长 几个 哪个 哪些 哪里 哪儿 哪一
    是否 是不是 可以 能否 能不能 可不可以 需要 应该 一个 一下 一些 我们 你们 他们 她们 它们
    自己 这个 那个 这些 那些 这样 那样 还是 或者 以及 并且 而且 但是 因为 所以 如果 的话
    吗 呢 吧 啊 呀 么 嘛 的 了 是 在 和 与 及 或 我 你 您 他 她 它 这 那 哪 谁 几 个 把 被
    就 都 也 还 着 之 得
    """
CHINESE = frozenset(_CHINESE.split())
"""Chinese function words and particles (Simplified), each removed from a run of Chinese
before it is cut into character pairs."""

LONGEST_CHINESE = max(len(word) for word in CHINESE)


def split_chinese(run: str) -> list[str]:
    """The pieces of a run of CJK characters left between its stop words (longest match
    first, left to right): "婚假有多少个工作日" gives ["婚假有", "工作日"]."""
    pieces: list[str] = []
    start = position = 0
    while position < len(run):
        for size in range(min(LONGEST_CHINESE, len(run) - position), 0, -1):
            if run[position : position + size] in CHINESE:
                if position > start:
                    pieces.append(run[start:position])
                position += size
                start = position
                break
        else:
            position += 1
    if start < len(run):
        pieces.append(run[start:])
    return pieces
