// Typeset the \( ... \) and \[ ... \] spans that pymdownx.arithmatex writes, on every page
// (Material's instant navigation swaps pages without reloading, hence document$).
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
  });
});
