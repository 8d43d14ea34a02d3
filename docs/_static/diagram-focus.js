// A diagram wider than its box scrolls inside it; open the box on the path the run took
// (data-focus: the highlighted boxes' position as a fraction of the diagram's width, set by the build).
window.addEventListener("load", function () {
  document.querySelectorAll("a.xp-diagram-link[data-focus]").forEach(function (link) {
    var box = link.closest(".xp-diagram-box");
    if (!box || box.scrollWidth <= box.clientWidth) return;
    var x = parseFloat(link.dataset.focus) * box.scrollWidth - box.clientWidth / 2;
    box.scrollLeft = Math.max(0, Math.min(x, box.scrollWidth - box.clientWidth));
  });
});
