"""Documents: bytes in a format become text, for the two paths that read them.

An attachment in a chat request becomes flat text (``attached.py``: ``read_file_part``,
``read_document``, a ``Document``); a knowledge-base upload becomes blocks in reading
order, each with its page and heading path (``ExtractedDocument`` of ``Block`` s, read
by the ``read_*`` functions below and dispatched by ``knowledge/extract.py``). Each
format is read in one module, both renderings side by side, sharing the opening, the
checks and the limits:

- ``text.py``: decoding (byte-order marks, charsets, UTF-8, Windows-1252), clean text,
  and plain text (flat; paragraphs);
- ``markdown.py``: Markdown's headings and fenced code as sections (flat: plain text);
- ``html.py``: ``html_to_text`` (Markdown-like text; also ``web_fetch``'s) and
  ``read_html``'s walk into blocks;
- ``pdf.py``: ``open_pdf`` and ``page_content_bytes``; ``pdf_text`` (pages) and
  ``read_pdf`` (blocks per page);
- ``docx.py``: the check against ZIP bombs; ``docx_text`` (Markdown-like) and
  ``read_docx`` (sections, row groups);
- ``csv.py``, ``json.py``: row groups and labelled JSON values (flat: plain text);
- ``kinds.py``: which format a document is (media type, extension, sniffed bytes; one
  order per path) and ``media_type_of`` for a Content-Type;
- ``blocks.py``: the block building the readers share (paragraphs, the heading path,
  row groups, the finished document);
- ``types.py``: ``Document``, ``DocumentLimits``, ``DocumentError``, ``Block``,
  ``ExtractedDocument``, ``UnreadableDocument``.

Everything here is synchronous, trusts no input and costs what the input costs: the
server calls it only in reader processes with a deadline and a memory limit
(``parley.extraction``). Importing the package imports nothing else.

What does not belong here: putting an attachment into a prompt
(``transforms/attachments.py``), which formats a knowledge base takes and chunking
(``knowledge/``), fetching pages (``tools/builtins/web.py``), fencing untrusted text for
a model (``parley/untrusted.py``). This package imports no other of Parley's but the
shared vocabulary (``errors``, ``messages``): tools, transforms, knowledge and
extraction import it, never the reverse.
"""
