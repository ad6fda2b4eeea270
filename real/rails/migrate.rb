# ActiveRecord::MigrationContext#migrate, as `rails db:migrate` runs it (Rails 6.1: the
# migrator's advisory lock is taken with pg_try_advisory_lock on a connection of its own;
# activerecord-6.1.7 lib/active_record/migration.rb, with_advisory_lock).
require "active_record"
require "logger"

ActiveRecord::Base.establish_connection(ENV.fetch("DATABASE_URL"))
ActiveRecord::Base.logger = Logger.new($stdout)
ActiveRecord::Base.logger.level = Logger::INFO
dir = File.join(__dir__, "db", "migrate")
ctx = ActiveRecord::MigrationContext.new([dir], ActiveRecord::SchemaMigration)
begin
  ctx.migrate
  puts "migrated: #{ActiveRecord::SchemaMigration.all_versions.inspect}"
rescue ActiveRecord::ConcurrentMigrationError => e
  puts "ConcurrentMigrationError: #{e.message}"
  exit 3
end
