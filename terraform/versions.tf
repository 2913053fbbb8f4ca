terraform {
  # 1.5: `check` blocks; optional() object attributes with defaults need 1.3.
  required_version = ">= 1.5.0"

  required_providers {
    # 6.x has everything used here (cloudfunctions2 build_config.service_account,
    # storage soft_delete_policy, cloud_run_v2 IAM). 7.x is not accepted until it can be schema-checked
    # (tests/unit/test_terraform_schema.py): no provider binding of 7.x exists to check against.
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 7.0"
    }
    # Only for google_project_service_identity (beta-only): it creates the Pub/Sub service agent
    # before the dead-letter and OIDC IAM bindings that name it.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.0, < 7.0"
    }
    # archive_file with repeated `source` blocks and output_file_mode.
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3.0"
    }
    # time_sleep: alert policies wait for their log-based metrics to reach Cloud Monitoring.
    time = {
      source  = "hashicorp/time"
      version = ">= 0.9, < 1.0"
    }
  }
}
