// DOM helpers: an element by id, and an element built from a tag, attributes and children.
export const $ = (id) => document.getElementById(id);

// el("td", {class: "num", title: "..."}, child, ...): "class" sets className, "on<event>" adds a
// listener, any other key an attribute; children are nodes or text (null and undefined skipped).
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) {
    if (k === "class") e.className = attrs[k];
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
    else e.setAttribute(k, attrs[k]);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
