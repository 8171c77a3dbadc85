// On a phone, code lines wrap (docs/stylesheets/extra.css); each line's continuation is indented
// four columns past the line's own indentation, as an editor's soft wrap shows it. The stylesheet
// reads the indentation from --indent, set here once per page (Material's document$ emits on
// every page load, instant navigation included).
document$.subscribe(function () {
  var lines = document.querySelectorAll('.md-typeset pre > code > span[id^="__span"]');
  lines.forEach(function (line) {
    var indent = line.textContent.match(/^ */)[0].length + 4;
    line.style.setProperty("--indent", indent + "ch");
  });
});
