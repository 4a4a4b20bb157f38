// The knowledge view (being written).
import { h } from "./dom.js";

export function mount(main) {
  main.append(h("p.muted", "This page is not written yet."));
}
