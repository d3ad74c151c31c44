#include "rootfs/build_spec.h"

#include <boost/json.hpp>
#include <cctype>

#include "common/encoding.h"
#include "common/json_fields.h"
#include "common/sha256.h"
#include "rootfs/template.h"

namespace cela::rootfs {

namespace json = boost::json;

std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::run: return "run";
    case StepKind::copy: return "copy";
    case StepKind::env: return "env";
    case StepKind::workdir: return "workdir";
    case StepKind::user: return "user";
  }
  return "?";
}

namespace {

bool valid_env_name(std::string_view k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0]))) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

Result<void> check_path(std::string_view p, std::string_view what) {
  if (p.empty() || p[0] != '/' || p.find('\0') != std::string_view::npos)
    return fail(ErrorCode::invalid_argument, std::string(what) + " must be an absolute path");
  return {};
}

std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out.push_back(c);
  }
  return out + "'";
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

// Words split on blanks, with "..." and '...' quoting (the quotes removed).
std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < s.size()) cur.push_back(s[++i]);
      else cur.push_back(c);
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(std::move(cur)), cur.clear();
      in_word = false;
    } else if (c == '\\' && i + 1 < s.size()) {
      cur.push_back(s[++i]);
      in_word = true;
    } else {
      cur.push_back(c);
      in_word = true;
    }
  }
  if (in_word) out.push_back(std::move(cur));
  return out;
}

// $NAME and ${NAME} from `vars`; unknown names expand to "" as in Docker.
std::string expand(std::string_view s, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    if (s[i] != '$' || i + 1 >= s.size()) {
      out.push_back(s[i]);
      continue;
    }
    size_t start = i + 1;
    std::string name;
    if (s[start] == '{') {
      size_t close = s.find('}', start);
      if (close == std::string_view::npos) {
        out.push_back(s[i]);
        continue;
      }
      name = std::string(s.substr(start + 1, close - start - 1));
      i = close;
    } else {
      size_t end = start;
      while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) ++end;
      if (end == start) {
        out.push_back(s[i]);
        continue;
      }
      name = std::string(s.substr(start, end - start));
      i = end - 1;
    }
    if (auto it = vars.find(name); it != vars.end()) out += it->second;
  }
  return out;
}

Result<BuildStep> parse_step(const json::value& v, size_t index, bool allow_sources) {
  std::string where = "steps[" + std::to_string(index) + "]";
  if (!v.is_object() || v.get_object().size() != 1)
    return fail(ErrorCode::invalid_argument, "field `" + where + "` must be an object with one key (run, copy, env, workdir, user)");
  const auto& [key, value] = *v.get_object().begin();
  BuildStep step;
  auto want_string = [&](StepKind kind) -> Result<BuildStep> {
    if (!value.is_string() || value.get_string().empty())
      return fail(ErrorCode::invalid_argument, "field `" + where + "." + std::string(key) + "` must be a non-empty string");
    step.kind = kind;
    step.text = std::string(value.get_string());
    return step;
  };
  if (key == "run") return want_string(StepKind::run);
  if (key == "user") return want_string(StepKind::user);
  if (key == "workdir") {
    auto s = want_string(StepKind::workdir);
    if (s)
      if (auto ok = check_path(s->text, "field `" + where + ".workdir`"); !ok) return std::unexpected(ok.error());
    return s;
  }
  if (key == "env") {
    if (!value.is_object()) return fail(ErrorCode::invalid_argument, "field `" + where + ".env` must be an object");
    step.kind = StepKind::env;
    for (const auto& [k, val] : value.get_object()) {
      if (!valid_env_name(k) || !val.is_string())
        return fail(ErrorCode::invalid_argument, "field `" + where + ".env` needs NAME: \"value\" pairs");
      step.env.emplace_back(std::string(k), std::string(val.get_string()));
    }
    return step;
  }
  if (key == "copy") {
    if (!value.is_object()) return fail(ErrorCode::invalid_argument, "field `" + where + ".copy` must be an object");
    JsonFields f(value.get_object(), where + ".copy");
    if (auto ok = allow_sources ? f.only({"archive_b64", "src", "to"}) : f.only({"archive_b64", "to"}); !ok)
      return std::unexpected(ok.error());
    auto to = f.require_string("to");
    if (!to) return std::unexpected(to.error());
    if (auto ok = check_path(*to, "field `" + where + ".copy.to`"); !ok) return std::unexpected(ok.error());
    step.kind = StepKind::copy;
    step.to = *to;
    auto b64 = f.string("archive_b64");
    if (!b64) return std::unexpected(b64.error());
    if (*b64) {
      auto raw = base64_decode(**b64);
      if (!raw) return fail(ErrorCode::invalid_argument, "field `" + where + ".copy.archive_b64` is not padded base64");
      step.archive = std::move(*raw);
    } else if (allow_sources) {
      auto src = f.require_string("src");
      if (!src) return std::unexpected(src.error());
      step.sources = {*src};
    } else {
      return fail(ErrorCode::invalid_argument, "field `" + where + ".copy.archive_b64` is required");
    }
    return step;
  }
  return fail(ErrorCode::invalid_argument, "field `" + where + "` has an unknown step `" + std::string(key) +
                                               "` (run, copy, env, workdir, user)");
}

}  // namespace

Result<BuildSpec> parse_build_json(const json::object& body, bool allow_sources) {
  JsonFields f(body);
  if (auto ok = f.only({"name", "from", "steps", "aliases", "start"}); !ok) return std::unexpected(ok.error());
  BuildSpec spec;
  auto aliases = f.string_array("aliases");
  if (!aliases) return std::unexpected(aliases.error());
  if (*aliases) {
    for (const auto& a : **aliases)
      if (!valid_template_name(a)) return std::unexpected(f.invalid("aliases", "holds a bad template name `" + a + "`"));
    spec.aliases = std::move(**aliases);
  }
  auto start = f.object("start");
  if (!start) return std::unexpected(start.error());
  if (*start) {
    auto parsed = parse_start_command(**start);
    if (!parsed) return std::unexpected(parsed.error());
    spec.start = std::move(*parsed);
  }
  auto name = f.string("name");
  if (!name) return std::unexpected(name.error());
  spec.name = name->value_or("");
  auto from = f.string("from");
  if (!from) return std::unexpected(from.error());
  spec.from = from->value_or("base");
  auto steps = f.array("steps");
  if (!steps) return std::unexpected(steps.error());
  if (!*steps) return fail(ErrorCode::invalid_argument, "field `steps` is required");
  if ((*steps)->size() > 256) return fail(ErrorCode::invalid_argument, "field `steps`: at most 256 steps");
  for (size_t i = 0; i < (*steps)->size(); ++i) {
    auto step = parse_step((**steps)[i], i, allow_sources);
    if (!step) return std::unexpected(step.error());
    spec.steps.push_back(std::move(*step));
  }
  return spec;
}

Result<BuildSpec> parse_dockerfile(std::string_view text, const std::map<std::string, std::string>& args) {
  BuildSpec spec;
  spec.from.clear();
  std::map<std::string, std::string> vars;
  std::vector<std::pair<int, std::string>> lines;  // logical lines (continuations joined)
  {
    std::string cur;
    int start = 0, number = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      std::string_view raw = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
      pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
      ++number;
      std::string line = trim(raw);
      if (cur.empty() && (line.empty() || line[0] == '#')) continue;
      if (!cur.empty() && !line.empty() && line[0] == '#') continue;  // comments inside continuations
      if (cur.empty()) start = number;
      if (!line.empty() && line.back() == '\\') {
        line.pop_back();
        cur += line + " ";
        continue;
      }
      cur += line;
      lines.emplace_back(start, std::move(cur));
      cur.clear();
    }
    if (!cur.empty()) lines.emplace_back(start, std::move(cur));
  }
  auto bad = [](int line, const std::string& what) {
    return fail(ErrorCode::invalid_argument, "Dockerfile line " + std::to_string(line) + ": " + what);
  };
  for (auto& [number, line] : lines) {
    size_t sp = line.find_first_of(" \t");
    std::string op = line.substr(0, sp);
    for (auto& c : op) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string rest = sp == std::string::npos ? "" : trim(std::string_view(line).substr(sp));
    if (op == "ARG") {
      auto eq = rest.find('=');
      std::string name = trim(rest.substr(0, eq));
      if (!valid_env_name(name)) return bad(number, "ARG needs NAME or NAME=default");
      if (auto it = args.find(name); it != args.end()) vars[name] = it->second;
      else if (eq != std::string::npos) vars[name] = expand(trim(rest.substr(eq + 1)), vars);
      else vars.emplace(name, "");
      continue;
    }
    if (op == "FROM") {
      if (!spec.from.empty()) return bad(number, "only one FROM (multi-stage builds are not supported)");
      auto words = split_words(expand(rest, vars));
      if (words.size() != 1) return bad(number, "FROM takes one cela template (no AS, no --platform)");
      spec.from = words[0];
      continue;
    }
    if (spec.from.empty()) return bad(number, op + " before FROM");
    BuildStep step;
    step.line = number;
    if (op == "RUN") {
      step.kind = StepKind::run;
      if (!rest.empty() && rest[0] == '[') {
        std::error_code ec;
        auto v = json::parse(rest, ec);
        if (ec || !v.is_array() || v.get_array().empty()) return bad(number, "RUN [..] must be a JSON array of strings");
        std::string cmd;
        for (const auto& a : v.get_array()) {
          if (!a.is_string()) return bad(number, "RUN [..] must be a JSON array of strings");
          cmd += (cmd.empty() ? "" : " ") + shell_quote(a.get_string());
        }
        step.text = cmd;
      } else {
        step.text = expand(rest, vars);
      }
      if (step.text.empty()) return bad(number, "RUN needs a command");
    } else if (op == "COPY" || op == "ADD") {
      if (op == "ADD") return bad(number, "ADD is not supported: use COPY");
      auto words = split_words(expand(rest, vars));
      if (!words.empty() && words[0].starts_with("--")) return bad(number, "COPY options (" + words[0] + ") are not supported");
      if (words.size() < 2) return bad(number, "COPY needs a source and a destination");
      step.kind = StepKind::copy;
      step.to = words.back();
      words.pop_back();
      step.sources = std::move(words);
    } else if (op == "ENV") {
      step.kind = StepKind::env;
      auto words = split_words(expand(rest, vars));
      if (words.empty()) return bad(number, "ENV needs NAME=value");
      if (words[0].find('=') == std::string::npos) {
        // ENV NAME value...
        std::string value;
        size_t sp2 = rest.find_first_of(" \t");
        if (sp2 != std::string::npos) value = expand(trim(rest.substr(sp2)), vars);
        step.env.emplace_back(words[0], value);
      } else {
        for (const auto& w : words) {
          auto eq = w.find('=');
          if (eq == std::string::npos) return bad(number, "ENV wants NAME=value pairs");
          step.env.emplace_back(w.substr(0, eq), w.substr(eq + 1));
        }
      }
      for (const auto& [k, v] : step.env) {
        if (!valid_env_name(k)) return bad(number, "bad ENV name `" + k + "`");
        vars[k] = v;  // later instructions see it, as in Docker
      }
    } else if (op == "WORKDIR") {
      step.kind = StepKind::workdir;
      step.text = expand(rest, vars);
      if (step.text.empty()) return bad(number, "WORKDIR needs a path");
    } else if (op == "USER") {
      step.kind = StepKind::user;
      step.text = expand(rest, vars);
      if (step.text.empty() || step.text.find(':') != std::string::npos)
        return bad(number, "USER takes one user name (no :group)");
    } else if (op == "CMD" || op == "ENTRYPOINT" || op == "EXPOSE" || op == "LABEL" || op == "MAINTAINER" ||
               op == "HEALTHCHECK" || op == "STOPSIGNAL" || op == "VOLUME" || op == "SHELL" || op == "ONBUILD") {
      spec.notes.push_back("line " + std::to_string(number) + ": " + op + " ignored (templates have no entry point)");
      continue;
    } else {
      return bad(number, "unknown instruction " + op);
    }
    spec.steps.push_back(std::move(step));
  }
  if (spec.from.empty()) return fail(ErrorCode::invalid_argument, "Dockerfile has no FROM");
  return spec;
}

std::string describe(const BuildStep& step) {
  switch (step.kind) {
    case StepKind::run: return "RUN " + step.text;
    case StepKind::copy: {
      std::string what;
      for (const auto& s : step.sources) what += s + " ";
      return "COPY " + (what.empty() ? std::string("archive ") : what) + "-> " + step.to;
    }
    case StepKind::env: {
      std::string out = "ENV";
      for (const auto& [k, v] : step.env) out += " " + k + "=" + v;
      return out;
    }
    case StepKind::workdir: return "WORKDIR " + step.text;
    case StepKind::user: return "USER " + step.text;
  }
  return "?";
}

std::string step_key(const std::string& parent_key, const BuildStep& step, const std::string& context) {
  Sha256 h;
  h.update("cela build step 1\nparent " + parent_key + "\nkind " + std::string(to_string(step.kind)) + "\n");
  switch (step.kind) {
    case StepKind::run:
    case StepKind::workdir:
    case StepKind::user:
      h.update("text " + std::to_string(step.text.size()) + " " + step.text + "\n");
      break;
    case StepKind::env:
      for (const auto& [k, v] : step.env) h.update("env " + k + " " + std::to_string(v.size()) + " " + v + "\n");
      break;
    case StepKind::copy:
      h.update("archive " + sha256_hex(step.archive) + "\nto " + step.to + "\n");
      break;
  }
  h.update("context " + std::to_string(context.size()) + " " + context + "\n");
  return h.hex_final();
}

}  // namespace cela::rootfs
