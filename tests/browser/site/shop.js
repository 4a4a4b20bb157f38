// Brightside Home, a demo shop for kairos's browser tests: the catalogue, the cart (sessionStorage) and the
// header every page shares. Static files only: no server logic, nothing from the network.
"use strict";

const PRODUCTS = [
  { id: "steel-kettle", name: "Brushed Steel Kettle 1.7 L", price: 39.0, kind: "kettle",
    text: "A fast-boil electric kettle with a limescale filter and a 360° base.",
    options: ["Silver", "Black", "Cream"] },
  { id: "glass-kettle", name: "Glass Kettle with Temperature Control", price: 54.5, kind: "kettle",
    text: "Five temperature settings for green tea, white tea and coffee; keeps warm for 30 minutes.",
    options: ["Clear", "Smoked"] },
  { id: "travel-kettle", name: "Compact Travel Kettle 0.5 L", price: 24.99, kind: "kettle",
    text: "Dual voltage, folding handle, two cups included.", options: ["White", "Mint"] },
  { id: "teapot", name: "Stoneware Teapot 1 L", price: 29.0, kind: "teapot",
    text: "Hand-glazed stoneware with a stainless steel infuser.", options: ["Slate", "Sand"] },
  { id: "french-press", name: "French Press 8 Cup", price: 32.0, kind: "coffee",
    text: "Double-walled steel keeps coffee hot.", options: ["Small (350 ml)", "Large (1 L)"] },
  { id: "toaster", name: "Two-Slice Toaster", price: 45.0, kind: "toaster",
    text: "Six browning levels, defrost and reheat.", options: ["Red", "Black", "Cream"] },
];
const CART_KEY = "brightside.cart";
const ORDER_KEY = "brightside.order";

function money(value) {
  return "£" + value.toFixed(2);
}

function product(id) {
  return PRODUCTS.find((p) => p.id === id) || null;
}

/** The products whose name, description or kind contains every word of the query. */
function search(query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return [];
  return PRODUCTS.filter((p) => {
    const hay = `${p.name} ${p.text} ${p.kind}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  });
}

function cart() {
  try {
    return JSON.parse(sessionStorage.getItem(CART_KEY) || "[]");
  } catch {
    return [];
  }
}

function saveCart(items) {
  sessionStorage.setItem(CART_KEY, JSON.stringify(items));
}

function param(name) {
  return new URLSearchParams(location.search).get(name) || "";
}

/** el("p.cls", {attrs}, ...children): text always goes in as text. */
function el(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split(".");
  const node = document.createElement(tag);
  if (classes.length) node.className = classes.join(" ");
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

/** The header: the shop's name, the search box (on every page but the home page) and the cart's count. */
function header(withSearch = true) {
  const count = cart().reduce((n, item) => n + item.quantity, 0);
  const bar = el("header.site", {});
  bar.append(el("a.logo", { href: "index.html" }, "Brightside Home"));
  if (withSearch) {
    const form = el("form.search", { action: "results.html", method: "get", role: "search" });
    const box = el("input", { type: "search", id: "header-q", name: "q", "aria-label": "Search the shop",
      placeholder: "Search products" });
    box.value = param("q");
    form.append(box, el("button", { type: "submit" }, "Search"));
    bar.append(form);
  }
  const nav = el("nav", { "aria-label": "Shop" });
  nav.append(el("a", { href: "cart.html" }, `Cart (${count})`), el("a", { href: "account.html" }, "My account"));
  bar.append(nav);
  document.body.prepend(bar);
  document.body.append(el("footer.site", {}, "Brightside Home is a demo shop: nothing is sold or sent."));
}
