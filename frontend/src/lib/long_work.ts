// Feedback for work that takes a while: a status line with a progress bar shown the moment the work starts
// (before any answer), then moved by the caller. One helper for the export button and the upload form.
export interface Progress {
  set(text: string, fraction?: number | null): void;
  element: HTMLElement;
}

// A status line (role=status) with a <progress>, inserted after `anchor`; `fraction` null or absent leaves
// the bar indeterminate (moving) until a figure is known.
export function progressLine(anchor: Element, id: string): Progress {
  let element = document.getElementById(id);
  if (!element) {
    element = document.createElement("p");
    element.id = id;
    element.className = "long-work";
    element.setAttribute("role", "status");
    anchor.insertAdjacentElement("afterend", element);
  }
  element.replaceChildren();
  const bar = document.createElement("progress");
  bar.max = 100;
  const text = document.createElement("span");
  element.append(bar, " ", text);
  const line = element;
  return {
    element: line,
    set(message: string, fraction?: number | null) {
      text.textContent = message;
      if (fraction === null || fraction === undefined) bar.removeAttribute("value");
      else bar.value = Math.round(100 * Math.min(1, Math.max(0, fraction)));
      line.dataset.percent = fraction === null || fraction === undefined ? "" : String(bar.value);
    },
  };
}
