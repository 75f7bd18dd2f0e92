// The API reference (API.md) from the package's type declarations.
//
//   node tools/api-reference.mjs [--check]
//
// Reads types/index.d.ts (`npm run build` writes it from the JSDoc with tsc) through the
// TypeScript compiler's API and writes every export of the package, its signature and
// its documentation, to API.md; with --check it writes nothing and exits 1 if API.md
// differs from what it would write. TypeScript is the system's (Debian's node-typescript):
// the package has no dependencies, development ones included.

import { execFileSync } from "node:child_process";
import { readFileSync, realpathSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));
const ENTRY = join(ROOT, "types", "index.d.ts");
const OUT = join(ROOT, "API.md");

/** The TypeScript compiler: from node_modules if there is one, else beside the system's tsc. */
function loadTypeScript() {
  const require = createRequire(import.meta.url);
  try {
    return require("typescript");
  } catch {
    const tsc = execFileSync("sh", ["-c", "command -v tsc"], { encoding: "utf8" }).trim();
    return require(join(dirname(realpathSync(tsc)), "..", "lib", "typescript.js"));
  }
}

const ts = loadTypeScript();
const program = ts.createProgram([ENTRY], { strict: true, noEmit: true });
const checker = program.getTypeChecker();
const entry = program.getSourceFile(ENTRY);
if (!entry) throw new Error(`${ENTRY} is missing: run \`npm run build\` first`);
const moduleSymbol = checker.getSymbolAtLocation(entry);

const FLAGS = ts.TypeFormatFlags.NoTruncation | ts.TypeFormatFlags.UseAliasDefinedOutsideCurrentScope;

/** Text without the `import("./x.js").` qualifiers the declarations carry. */
const plain = (text) => text.replace(/import\("[^"]+"\)\./g, "");
const typeText = (type, node) => plain(checker.typeToString(type, node, FLAGS));
const docOf = (symbol) => ts.displayPartsToString(symbol.getDocumentationComment(checker)).trim();

/** A symbol's documentation, and its JSDoc tags other than the ones signatures repeat. */
function documentation(symbol) {
  const text = docOf(symbol);
  const tags = symbol.getJsDocTags(checker)
    .filter((tag) => !["param", "returns", "typedef", "property", "type", "readonly", "template"]
      .includes(tag.name))
    .map((tag) => `@${tag.name} ${ts.displayPartsToString(tag.text ?? []).trim()}`);
  return [text, ...tags].filter(Boolean).join("\n\n");
}

function signatureText(name, signature, node) {
  return plain(`${name}${checker.signatureToString(signature, node, FLAGS)}`);
}

/** The parameter descriptions of a signature, as a list. */
function parameterList(signature) {
  const lines = [];
  for (const parameter of signature.getParameters()) {
    const text = docOf(parameter);
    // a destructured parameter has no name of its own: the declarations call it __0, __1...
    const name = parameter.getName().startsWith("__") ? "options" : parameter.getName();
    if (text) lines.push(`- \`${name}\`: ${text.replace(/\s*\n\s*/g, " ")}`);
  }
  return lines;
}

function quoteBlock(code) {
  return ["```ts", code, "```"];
}

/** The public members of a class: static first, then the instance's, in source order. */
function classSection(name, symbol) {
  const declaration = symbol.valueDeclaration;
  const lines = [];
  const classType = checker.getTypeOfSymbolAtLocation(symbol, declaration);
  const base = checker.getBaseTypes(checker.getDeclaredTypeOfSymbol(symbol))
    .map((type) => type.symbol?.getName()).filter(Boolean);
  lines.push(`### class ${name}${base.length ? ` extends ${base.join(", ")}` : ""}`, "");
  const doc = documentation(symbol);
  if (doc) lines.push(doc, "");
  for (const signature of classType.getConstructSignatures()) {
    if (!signature.getDeclaration()) continue;
    lines.push(...quoteBlock(signatureText(`new ${name}`, signature, declaration)));
    lines.push(...parameterList(signature), "");
  }
  for (const member of declaration.members) {
    if (ts.isConstructorDeclaration(member) || !member.name || ts.isPrivateIdentifier(member.name)) continue;
    const modifiers = ts.getCombinedModifierFlags(member);
    if (modifiers & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) continue;
    const memberSymbol = checker.getSymbolAtLocation(member.name);
    if (!memberSymbol) continue;
    const isStatic = (modifiers & ts.ModifierFlags.Static) !== 0;
    const owner = isStatic ? name : name.charAt(0).toLowerCase() + name.slice(1);
    const memberName = member.name.getText();
    let code;
    if (ts.isMethodDeclaration(member)) {
      const signature = checker.getSignatureFromDeclaration(member);
      code = signatureText(`${owner}.${memberName}`, signature, member);
      lines.push(`#### ${owner}.${memberName}()`, "", ...quoteBlock(code));
      const doc = documentation(memberSymbol);
      if (doc) lines.push("", doc);
      const parameters = parameterList(signature);
      if (parameters.length) lines.push("", ...parameters);
    } else {
      const type = checker.getTypeOfSymbolAtLocation(memberSymbol, member);
      const readonly = ts.isGetAccessorDeclaration(member) || (modifiers & ts.ModifierFlags.Readonly)
        ? "readonly " : "";
      code = `${readonly}${owner}.${memberName}: ${typeText(type, member)}`;
      lines.push(`#### ${owner}.${memberName}`, "", ...quoteBlock(code));
      const doc = documentation(memberSymbol);
      if (doc) lines.push("", doc);
    }
    lines.push("");
  }
  return lines;
}

function valueSection(name, symbol) {
  const declaration = symbol.valueDeclaration ?? symbol.declarations[0];
  const type = checker.getTypeOfSymbolAtLocation(symbol, declaration);
  const lines = [];
  const signatures = type.getCallSignatures();
  if (signatures.length && ts.isFunctionDeclaration(declaration)) {
    lines.push(`### ${name}()`, "");
    for (const signature of signatures) lines.push(...quoteBlock(signatureText(name, signature, declaration)));
    const doc = documentation(symbol);
    if (doc) lines.push("", doc);
    const parameters = parameterList(signatures[0]);
    if (parameters.length) lines.push("", ...parameters);
  } else {
    lines.push(`### ${name}`, "", ...quoteBlock(`const ${name}: ${typeText(type, declaration)}`));
    const doc = documentation(symbol);
    if (doc) lines.push("", doc);
  }
  lines.push("");
  return lines;
}

function typeSection(name, symbol) {
  const declaration = symbol.declarations[0];
  const type = checker.getDeclaredTypeOfSymbol(symbol);
  const lines = [`### type ${name}`, ""];
  const doc = documentation(symbol);
  if (doc) lines.push(doc, "");
  const properties = type.getProperties();
  if (properties.length && !(type.flags & ts.TypeFlags.Union) && !checker.isTupleType(type)) {
    lines.push("| member | type | |", "| --- | --- | --- |");
    for (const property of properties) {
      const propertyType = checker.getTypeOfSymbolAtLocation(property, declaration);
      const optional = property.flags & ts.SymbolFlags.Optional ? "?" : "";
      const text = docOf(property).replace(/\s*\n\s*/g, " ");
      const cell = (value) => value.replace(/\|/g, "\\|");
      lines.push(`| \`${property.getName()}${optional}\` | \`${cell(typeText(propertyType, declaration))}\` | ${cell(text)} |`);
    }
  } else {
    lines.push(...quoteBlock(`type ${name} = ${typeText(type, declaration)}`));
  }
  lines.push("");
  return lines;
}

const exported = checker.getExportsOfModule(moduleSymbol).map((symbol) => {
  const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
  return { name: symbol.getName(), symbol: target };
});
const isClass = ({ symbol }) => (symbol.flags & ts.SymbolFlags.Class) !== 0;
const isType = ({ symbol }) => (symbol.flags & (ts.SymbolFlags.TypeAlias | ts.SymbolFlags.Interface)) !== 0
  && !(symbol.flags & ts.SymbolFlags.Value);
const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
const session = exported.filter((e) => e.name === "Session");
const errors = exported.filter((e) => isClass(e) && e.name.endsWith("Error")).sort(byName);
const values = exported.filter((e) => !isClass(e) && !isType(e)).sort(byName);
const types = exported.filter(isType).sort(byName);
const rest = exported.filter((e) => !session.includes(e) && !errors.includes(e)
  && !values.includes(e) && !types.includes(e));
if (rest.length) throw new Error(`exports of no section: ${rest.map((e) => e.name).join(", ")}`);

const PACKAGE = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
const lines = [
  `# ${PACKAGE.name} ${PACKAGE.version}: API reference`,
  "",
  "Generated from the package's type declarations (`npm run build`, then",
  "`npm run api`); the guide is README.md. Everything here is exported by the package's",
  "entry point (`import { Session } from \"segshuffle-web\"`); nothing else is public.",
  "",
  "## Session",
  "",
  ...session.flatMap((e) => classSection(e.name, e.symbol)),
  "## Errors",
  "",
  ...errors.flatMap((e) => classSection(e.name, e.symbol)),
  "## Constants and functions",
  "",
  ...values.flatMap((e) => valueSection(e.name, e.symbol)),
  "## Types",
  "",
  ...types.flatMap((e) => typeSection(e.name, e.symbol)),
];
const text = `${lines.join("\n").replace(/\n{3,}/g, "\n\n").trimEnd()}\n`;
if (process.argv.includes("--check")) {
  let current = "";
  try {
    current = readFileSync(OUT, "utf8");
  } catch {
    // missing: stale
  }
  if (current !== text) {
    process.stderr.write("API.md is not what the declarations give: run `npm run build && npm run api`\n");
    process.exit(1);
  }
} else {
  writeFileSync(OUT, text);
}
