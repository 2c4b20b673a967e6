// Test-environment fixes, imported FIRST by the tests of code that sanitises HTML
// (markdown.ts and the components that render Markdown). Browsers need none of this.
//
// happy-dom differs from browsers in two ways that make DOMPurify leave HTML unsanitised:
// 1. Node.prototype's nodeName getter answers "" for every node. DOMPurify reads names
//    through that getter (a clobbered element cannot lie to it), sees no name and drops
//    allowed elements.
// 2. Its NodeIterator walks from the node it returned last, so when DOMPurify removes
//    that node the walk ends and everything after it is never checked. Browsers move an
//    iterator's reference when its node is removed (the DOM standard's "pre-removing
//    steps"); the iterator below does that.
// markdown.ts checks its sanitiser once and, if it fails, shows every text escaped; so
// without this file the Markdown tests fail rather than pass unsafely.

const NAMES: Record<number, string> = {
  3: "#text",
  4: "#cdata-section",
  8: "#comment",
  9: "#document",
  11: "#document-fragment",
};

function fixNodeName(): void {
  const descriptor = Object.getOwnPropertyDescriptor(Node.prototype, "nodeName");
  if (!descriptor?.get || descriptor.get.call(document.createElement("p")) === "P") return;
  Object.defineProperty(Node.prototype, "nodeName", {
    ...descriptor,
    get(this: Node): string {
      if (this.nodeType === 1) return (this as Element).tagName;
      if (this.nodeType === 7) return (this as ProcessingInstruction).target;
      if (this.nodeType === 10) return (this as DocumentType).name;
      return NAMES[this.nodeType] ?? "";
    },
  });
}

/** The NodeIterator of the DOM standard (filters by whatToShow only). */
class StandardNodeIterator {
  private reference: Node;
  private beforeReference = true;

  constructor(
    readonly root: Node,
    readonly whatToShow: number,
  ) {
    this.reference = root;
    live.add(this);
  }

  nextNode(): Node | null {
    let node: Node | null = this.reference;
    let before = this.beforeReference;
    for (;;) {
      if (before) before = false;
      else {
        node = following(node!, this.root);
        if (!node) {
          live.delete(this);
          return null;
        }
      }
      if (this.whatToShow & (1 << (node!.nodeType - 1))) {
        this.reference = node!;
        this.beforeReference = false;
        return node;
      }
    }
  }

  detach(): void {
    live.delete(this);
  }

  /** The standard's pre-removing steps: keep a place in the tree when ours is removed. */
  preRemove(removed: Node): void {
    if (removed === this.root || !removed.contains(this.reference)) return;
    if (this.beforeReference) {
      const next = followingOutside(removed, this.root);
      if (next) {
        this.reference = next;
        return;
      }
      this.beforeReference = false;
    }
    const previous = removed.previousSibling;
    this.reference = previous ? lastDescendant(previous) : removed.parentNode!;
  }
}

const live = new Set<StandardNodeIterator>();

function following(node: Node, root: Node): Node | null {
  if (node.firstChild) return node.firstChild;
  return followingOutside(node, root);
}

function followingOutside(node: Node, root: Node): Node | null {
  for (let at: Node | null = node; at && at !== root; at = at.parentNode) {
    if (at.nextSibling) return at.nextSibling;
  }
  return null;
}

function lastDescendant(node: Node): Node {
  let at = node;
  while (at.lastChild) at = at.lastChild;
  return at;
}

/** The prototype on `object`'s chain that defines `name` (happy-dom keeps classes per
 *  window, so the global constructors' prototypes may not be the ones in use). */
function owner(object: object, name: string): Record<string, unknown> {
  for (let proto = object; proto; proto = Object.getPrototypeOf(proto) as object) {
    if (Object.prototype.hasOwnProperty.call(proto, name)) return proto as Record<string, unknown>;
  }
  throw new Error(`no ${name} on ${String(object)}`);
}

function patch(object: object, name: string, wrap: (original: Function) => Function): void {
  const proto = owner(object, name);
  const original = proto[name] as Function & { patched?: boolean };
  if (original.patched) return;
  const wrapped = wrap(original) as Function & { patched?: boolean };
  wrapped.patched = true;
  proto[name] = wrapped;
}

function beforeRemoving(node: Node): void {
  for (const iterator of live) iterator.preRemove(node);
}

function fixNodeIterator(): void {
  const created = document.implementation.createHTMLDocument("");
  for (const doc of [document, created]) {
    patch(doc, "createNodeIterator", () => function (root: Node, whatToShow = 0xffffffff) {
      return new StandardNodeIterator(root, whatToShow);
    });
  }
  for (const node of [document.createElement("p"), created.createElement("p"), created.createTextNode("")]) {
    patch(node, "removeChild", (original) => function (this: Node, child: Node) {
      beforeRemoving(child);
      return original.call(this, child);
    });
    patch(node, "replaceChild", (original) => function (this: Node, replacement: Node, child: Node) {
      beforeRemoving(child);
      return original.call(this, replacement, child);
    });
    patch(node, "remove", (original) => function (this: Node) {
      beforeRemoving(this);
      return original.call(this);
    });
  }
}

fixNodeName();
fixNodeIterator();

export {};
