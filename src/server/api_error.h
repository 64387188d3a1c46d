// OpenAI-shaped API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace gemma::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "")
      : std::runtime_error(message),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)),
        type_(type.empty() ? DefaultType(status) : std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

  nlohmann::json ToJson() const {
    nlohmann::json e = {{"message", what()},
                        {"type", type_},
                        {"param", param_.empty() ? nlohmann::json() : nlohmann::json(param_)},
                        {"code", code_.empty() ? nlohmann::json() : nlohmann::json(code_)}};
    return {{"error", e}};
  }

  // The names OpenAI's API uses for each class of status.
  static std::string DefaultType(int status) {
    switch (status) {
      case 401:
        return "authentication_error";
      case 404:
        return "not_found_error";
      case 413:
        return "request_too_large";
      case 429:
        return "rate_limit_error";
      case 503:
        return "service_unavailable";
      default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
  }

 private:
  int status_;
  std::string param_, code_, type_;
};

inline ApiError BadField(const std::string& field, const std::string& what) {
  return ApiError(400, "'" + field + "': " + what, field, "invalid_value");
}

}  // namespace gemma::server
