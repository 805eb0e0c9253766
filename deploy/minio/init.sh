#!/bin/sh
# One-shot (compose service minio-init): the lake bucket and three
# least-privilege users. The lake-writer may read and write objects in the
# bucket; the reconciler and the api (erasure reports list the lake) may only
# read them. Neither can manage users, other
# buckets or policies. Idempotent: safe to run on every `compose up`.
set -eu
: "${OML_LAKE_BUCKET:?}" "${OML_LAKE_WRITER_S3_KEY:?}" "${OML_LAKE_WRITER_S3_SECRET:?}"
: "${OML_RECONCILER_S3_KEY:?}" "${OML_RECONCILER_S3_SECRET:?}" "${OML_API_S3_KEY:?}" "${OML_API_S3_SECRET:?}"

mc alias set oml http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing "oml/$OML_LAKE_BUCKET"

policy() {  # name, actions (JSON list)
  f="/tmp/$1.json"
  cat >"$f" <<JSON
{"Version": "2012-10-17", "Statement": [
  {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"], "Resource": ["arn:aws:s3:::$OML_LAKE_BUCKET"]},
  {"Effect": "Allow", "Action": $2, "Resource": ["arn:aws:s3:::$OML_LAKE_BUCKET/*"]}
]}
JSON
  mc admin policy create oml "$1" "$f" >/dev/null
}
policy oml-lake-writer '["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]'
policy oml-lake-reader '["s3:GetObject"]'

mc admin user add oml "$OML_LAKE_WRITER_S3_KEY" "$OML_LAKE_WRITER_S3_SECRET" >/dev/null
mc admin user add oml "$OML_RECONCILER_S3_KEY" "$OML_RECONCILER_S3_SECRET" >/dev/null
mc admin policy attach oml oml-lake-writer --user "$OML_LAKE_WRITER_S3_KEY" >/dev/null 2>&1 || true
mc admin user add oml "$OML_API_S3_KEY" "$OML_API_S3_SECRET" >/dev/null
mc admin policy attach oml oml-lake-reader --user "$OML_RECONCILER_S3_KEY" >/dev/null 2>&1 || true
mc admin policy attach oml oml-lake-reader --user "$OML_API_S3_KEY" >/dev/null 2>&1 || true
echo "minio-init: bucket $OML_LAKE_BUCKET; users: lake-writer (read/write), reconciler and api (read)"
