"""What a finished reply goes through before it is saved (the finish transforms).

- The assistant's storage regex rules rewrite its text (display-only rules never touch
  what is stored; the stream applies them, ``api/chat.py``).
- Base64 images, in the text as Markdown (``![alt](data:image/png;base64,...)``) or as
  image parts, are saved as files and replaced by the URL that serves them
  (``GET /v1/files/{id}``): a reply row holds no megabytes of base64.
- Unclosed think tags need nothing here: the stream reader already ended the reasoning.

What does not belong here: the rules themselves (``transforms/output.py``), the files
(``transforms/images.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from parley.errors import ParleyError
from parley.messages import ImagePart, Part, TextPart
from parley.patterns import Budget
from parley.transforms.images import ImageSaver, rewrite_markdown_images
from parley.transforms.output import RegexRule, rewrite_parts

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Finisher:
    owner: str
    rules: tuple[RegexRule, ...]
    images: ImageSaver | None
    budget: Budget | None = None
    """The turn's time for its regex rules (None: the reply's own)."""

    def needed(self, parts: Sequence[Part]) -> bool:
        """Whether ``finish`` would change anything (checked on the event loop, cheaply:
        most replies have no rules and no inline images)."""
        if any(rule.applies("assistant", for_storage=True) for rule in self.rules):
            return True
        return self.images is not None and any(_inline_image(p) for p in parts)

    def finish(self, parts: Sequence[Part]) -> tuple[Part, ...]:
        """The reply as it is stored (blocking: file writes; run it in a thread)."""
        done = rewrite_parts(parts, self.rules, "assistant", for_storage=True, budget=self.budget)
        saver = self.images
        if saver is None:
            return done
        out: list[Part] = []
        for part in done:
            if isinstance(part, TextPart) and "data:image" in part.text:
                out.append(TextPart(rewrite_markdown_images(part.text, saver, self.owner)))
            elif isinstance(part, ImagePart) and part.url.startswith("data:"):
                try:
                    stored = saver.save_data_url(self.owner, part.url)
                except (ParleyError, OSError) as exc:
                    log.warning("an image of a reply was kept inline: %s", exc)
                    out.append(part)
                else:
                    out.append(ImagePart(stored.url, part.detail))
            else:
                out.append(part)
        return tuple(out)


def _inline_image(part: Part) -> bool:
    if isinstance(part, TextPart):
        return "data:image" in part.text
    return isinstance(part, ImagePart) and part.url.startswith("data:")
